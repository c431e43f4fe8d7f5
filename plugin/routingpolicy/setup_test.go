package routingpolicy

import (
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	"github.com/miekg/dns"
)

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, block, err string
	}{
		{"weight above", `wrr www A 60 "1200=10.0.0.1"`, `weight "1200" out of range 0..1000`}, // R-WRR-1
		{"weight negative", `wrr www A 60 "-1=10.0.0.1"`, `weight "-1" out of range 0..1000`},
		{"trickle", `failover www A 60 "10.0.0.1" "us-east1=10.0.0.2" trickle 1.5`, `trickle "1.5" out of range 0..1`}, // R-FO-3
		{"unknown region", `geo www A 60 "us-est1=10.0.0.1"`, `unknown region "us-est1" (did you mean us-east1`},
		{"location twice", `geo www A 60 "us-east1=10.0.0.1;us-east1=10.0.0.2"`, `location us-east1 given twice`},
		{"bad A", `wrr www A 60 "1=10.0.0.300"`, `rdata "10.0.0.300" is not valid A data`},
		{"v4 in AAAA", `wrr www AAAA 60 "1=10.0.0.1"`, `is not valid AAAA data`},
		{"healthcheck on CNAME", `wrr www CNAME 60 "1=a.example.org." healthcheck web`, `healthcheck "web" on type CNAME: only A and AAAA`},
		{"policy type", `wrr www NS 60 "1=ns.example.org."`, `type "NS" cannot carry a policy`},
		{"no equals", `wrr www A 60 "10.0.0.1"`, `has no '='`},
		{"empty rdata", `wrr www A 60 "1=10.0.0.1,"`, `empty rdata`},
		{"fence on wrr", `wrr www A 60 "1=10.0.0.1" fence`, `fence applies to geo and failover only`},
		{"unknown option", `geo www A 60 "us-east1=10.0.0.1" sticky`, `unknown option "sticky"`},
		{"outside zone", `wrr www.example.net. A 60 "1=10.0.0.1"`, `outside the zones`},
		{"duplicate set", "wrr www A 60 \"1=10.0.0.1\"\ngeo www A 60 \"us-east1=10.0.0.2\"", `record set defined twice`},
		{"policy and plain", "record www A 60 10.0.0.3\nwrr www A 60 \"1=10.0.0.1\"", `record set defined twice`},
		{"cname and data", "record www CNAME 60 a\nrecord www A 60 10.0.0.3", `CNAME and other data`},
		{"unknown property", `weighted www`, `unknown property "weighted"`},
		{"ttl", `wrr www A sixty "1=10.0.0.1"`, `TTL "sixty" is not a number`},
		{"reload", `reload soon`, `reload "soon" is not a duration`},
		{"reload short", `reload 10ms`, `below the minimum of 1s`},
		{"record args", `record www A`, `record needs NAME TYPE TTL RDATA`},
		{"failover args", `failover www A 60 "10.0.0.1"`, `failover needs NAME TYPE TTL PRIMARY BACKUP`},
		{"two cnames", `wrr www CNAME 60 "1=a.example.org.,b.example.org."`, `at most one CNAME`},
		{"zonefile missing", `zonefile /nonexistent/db`, `zonefile: open /nonexistent/db`},
		{"subnet", `subnet us-east1 10.0.0.0/33`, `is not a CIDR`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := loadErr("routingpolicy example.org {\n" + tc.block + "\n}")
			if err == nil {
				t.Fatalf("no error, want %q", tc.err)
			}
			if !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %q, want it to contain %q", err, tc.err)
			}
		})
	}
}

func TestParseReverseZone(t *testing.T) {
	err := loadErr(`routingpolicy 10.in-addr.arpa {
		wrr 1.0.0 PTR 60 "1=a.example.org."
	}`)
	if err == nil || !strings.Contains(err.Error(), "cannot carry a policy") {
		t.Fatalf("PTR policy: %v", err)
	}
	err = loadErr(`routingpolicy 10.in-addr.arpa {
		wrr 1.0.0 TXT 60 "1=hello"
	}`)
	if err == nil || !strings.Contains(err.Error(), "not allowed in reverse zone") {
		t.Fatalf("policy in reverse zone: %v", err)
	}
}

func TestParseGood(t *testing.T) {
	c := caddy.NewTestController("dns", `routingpolicy example.org example.net {
		public
		region us-east1
		subnet europe-west2 10.2.0.0/16
		reload 0
		log
		fallthrough
		record @ MX 60 10 mail
		wrr www A 60 "1=10.0.0.1;2=10.0.0.2" healthcheck web
		geo geo.example.net. A 60 "us-east1=10.0.0.1" fence
		failover fo TXT 60 "primary" "us-east1=backup" trickle 0.25
	}`)
	cfgs, err := parse(c)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cfgs[0]
	if !cfg.Public || !cfg.Log || cfg.Reload != 0 || len(cfg.Zones) != 2 || len(cfg.Sets) != 3 || len(cfg.Records) != 1 {
		t.Fatalf("config: %+v", cfg)
	}
	if s := cfg.Sets[2]; s.trickle != 0.25 || s.kind != Failover || s.name != "fo.example.org." {
		t.Fatalf("failover spec: %+v", s)
	}
	d, err := cfg.load(fixedNow)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.zones) != 2 || d.match("geo.example.net.") == nil {
		t.Fatalf("zones: %v", d.zones)
	}
}

func TestSetupHealthcheckDefined(t *testing.T) {
	block := `routingpolicy example.org {
		wrr www A 60 "1=10.0.0.1;2=10.0.0.2" healthcheck web
	}`
	c := caddy.NewTestController("dns", block)
	err := setup(c)
	if err == nil || !strings.Contains(err.Error(), `wrr www.example.org./A: healthcheck "web" is not defined`) {
		t.Fatalf("undefined check: %v", err)
	}
	c = caddy.NewTestController("dns", block)
	d := health.DemandOf(c)
	d.DefineCheck("web")
	if err := setup(c); err != nil {
		t.Fatal(err)
	}
	// The contract (H-6): every checked address is wanted from startup to shutdown, through the
	// instance's Demand; setup itself takes nothing.
	probed := map[health.Key]bool{}
	stop := d.Serve("web", func(k health.Key) func() {
		probed[k] = true
		return func() { delete(probed, k) }
	})
	defer stop()
	if len(probed) != 0 {
		t.Fatalf("setup wanted %v", probed)
	}
	rp := dnsserver.GetConfig(c).Plugin[0](nil).(*RoutingPolicy)
	rp.board = health.NewBoard(time.Now)
	if err := rp.OnStartup(nil); err != nil {
		t.Fatal(err)
	}
	if len(probed) != 2 || !probed[health.Key{Check: "web", Addr: mustAddr("10.0.0.1")}] || !probed[health.Key{Check: "web", Addr: mustAddr("10.0.0.2")}] {
		t.Fatalf("probed after startup: %v", probed)
	}
	rp.OnShutdown()
	if len(probed) != 0 {
		t.Fatalf("probed after shutdown: %v", probed)
	}
}

func TestForwardedZone(t *testing.T) {
	rp, _ := newTest(t, `routingpolicy example.org {
		wrr www.corp A 60 "1=10.0.0.1"
	}`)
	d := rp.data.Load()
	corp := forwardsFunc(func(name string) bool { return dns.IsSubDomain("corp.example.org.", name) })
	if err := d.checkForwarded(corp); err == nil || !strings.Contains(err.Error(), "which outbound forwards") {
		t.Fatalf("policy in a forwarded zone: %v", err)
	}
	other := forwardsFunc(func(name string) bool { return dns.IsSubDomain("other.example.org.", name) })
	if err := d.checkForwarded(other); err != nil {
		t.Fatalf("unrelated forwarded zone: %v", err)
	}
}

type forwardsFunc func(string) bool

func (f forwardsFunc) Forwards(name string) bool { return f(name) }
