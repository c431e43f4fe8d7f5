package healthcheck

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
)

func TestParseDefaults(t *testing.T) {
	c := caddy.NewTestController("dns", `healthcheck {
		check web {
		}
	}`)
	cfg, err := parse(c)
	if err != nil {
		t.Fatal(err)
	}
	ch := cfg.checks[0]
	// HC-1: default interval 30 s.
	if ch.Protocol != TCP || ch.Port != 80 || ch.Interval != 30*time.Second || ch.Timeout != 5*time.Second ||
		ch.HealthyThreshold != 2 || ch.UnhealthyThreshold != 2 || ch.ProbersPerRegion != 1 || ch.Path != "/" || ch.TLSVerify {
		t.Errorf("defaults: %+v", ch)
	}
	if len(ch.Regions) != 1 || ch.Regions[0].Name != defaultRegionName || len(ch.Regions[0].Sources) != 0 {
		t.Errorf("default region: %+v", ch.Regions)
	}
	if !cfg.readyWait || cfg.log {
		t.Errorf("block defaults: %+v", cfg)
	}
}

func TestParseFull(t *testing.T) {
	c := caddy.NewTestController("dns", `healthcheck {
		check web {
			protocol https
			port 8443
			path /healthz?full=1
			host www.example.org
			content OK
			interval 10s
			timeout 2s
			healthy_threshold 3
			unhealthy_threshold 4
			prober us-east1 127.0.0.2
			prober us-east1 127.0.0.3
			prober europe-west1
			prober lab 127.0.0.4
			probers_per_region 3
			tls_verify
		}
		loadbalancer 10.0.0.100 {
			backends 10.0.0.1 10.0.0.2:8080 [2001:db8::1]:443
			backends 2001:db8::2
			check web
			threshold 50%
		}
		loadbalancer 10.0.0.101
		coordinates lab 52.0 4.0
		log
		ready_wait off
	}`)
	cfg, err := parse(c)
	if err != nil {
		t.Fatal(err)
	}
	ch := cfg.checks[0]
	if ch.Protocol != HTTPS || ch.Port != 8443 || ch.Path != "/healthz?full=1" || ch.Host != "www.example.org" || ch.Content != "OK" ||
		ch.Interval != 10*time.Second || ch.Timeout != 2*time.Second || ch.HealthyThreshold != 3 || ch.UnhealthyThreshold != 4 ||
		ch.ProbersPerRegion != 3 || !ch.TLSVerify || !ch.Log {
		t.Errorf("check: %+v", ch)
	}
	if len(ch.Regions) != 3 || ch.Regions[0].Name != "us-east1" || len(ch.Regions[0].Sources) != 2 || ch.Regions[2].Name != "lab" {
		t.Errorf("regions: %+v", ch.Regions)
	}
	// With two source addresses, the 3 probers of us-east1 use them in turn.
	if ch.source(0, 0) != netip.MustParseAddr("127.0.0.2") || ch.source(0, 1) != netip.MustParseAddr("127.0.0.3") ||
		ch.source(0, 2) != netip.MustParseAddr("127.0.0.2") || ch.source(1, 0).IsValid() {
		t.Errorf("sources")
	}
	lb := cfg.lbs[0]
	if lb.VIP != netip.MustParseAddr("10.0.0.100") || lb.Check != "web" || lb.Threshold != 50 || len(lb.Backends) != 4 ||
		lb.Backends[1] != netip.MustParseAddrPort("10.0.0.2:8080") || lb.Backends[0].Port() != 0 {
		t.Errorf("loadbalancer: %+v", lb)
	}
	if cfg.lbs[1].Threshold != defaultLBThreshold || len(cfg.lbs[1].Backends) != 0 {
		t.Errorf("empty loadbalancer: %+v", cfg.lbs[1])
	}
	if !cfg.log || cfg.readyWait {
		t.Errorf("block: %+v", cfg)
	}
}

func TestParseErrors(t *testing.T) {
	check := func(body string) string { return "healthcheck {\ncheck web {\n" + body + "\n}\n}" }
	tests := []struct {
		name, input, want string
	}{
		// HC-1: interval 1s..300s, timeout below the interval.
		{"interval 0s", check("interval 0s"), `interval "0s" out of range 1s..300s`},
		{"interval 301s", check("interval 301s"), `interval "301s" out of range 1s..300s`},
		{"interval garbage", check("interval soon"), `interval "soon" out of range 1s..300s`},
		{"timeout = interval", check("interval 10s\ntimeout 10s"), "timeout 10s must be below the interval 10s"},
		{"timeout > interval", check("timeout 40s"), "timeout 40s must be below the interval 30s"},
		{"default timeout vs short interval", check("interval 2s"), "the default timeout 5s must be below the interval 2s"},
		{"timeout 0", check("timeout 0s"), `timeout "0s": want a positive duration`},
		{"healthy threshold 0", check("healthy_threshold 0"), `healthy_threshold "0" out of range 1..100`},
		{"unhealthy threshold 0", check("unhealthy_threshold 0"), `unhealthy_threshold "0" out of range 1..100`},
		{"threshold x", check("healthy_threshold x"), `healthy_threshold "x" out of range 1..100`},
		{"unknown protocol", check("protocol udp"), `protocol "udp" unknown (want tcp, http or https)`},
		{"port 0", check("port 0"), `port "0" out of range 1..65535`},
		{"port 65536", check("port 65536"), `port "65536" out of range 1..65535`},
		{"port two values", check("port 80 81"), "port needs exactly one value, got 2"},
		{"path relative", check("protocol http\npath healthz"), `path "healthz" must start with '/'`},
		{"content on tcp", check("content OK"), "content is only for protocol http or https"},
		{"path on tcp", check("path /x"), "path is only for protocol http or https"},
		{"tls_verify on http", check("protocol http\ntls_verify"), "tls_verify is only for protocol https"},
		{"tls_verify value", check("protocol https\ntls_verify yes"), "tls_verify takes no value"},
		{"probers 0", check("probers_per_region 0"), `probers_per_region "0" out of range 1..10`},
		{"probers 11", check("probers_per_region 11"), `probers_per_region "11" out of range 1..10`},
		{"prober no region", check("prober"), "prober needs REGION [SOURCE_ADDRESS], got 0 arguments"},
		{"prober bad source", check("prober us-east1 nowhere"), `source address "nowhere" is not a unicast IP address`},
		{"prober unknown region", check("prober us-eats1"), `unknown region "us-eats1" (did you mean us-east1`},
		{"prober twice", check("prober us-east1\nprober us-east1"), "prober us-east1 given twice"},
		{"prober source twice", check("prober us-east1 127.0.0.2\nprober us-east1 127.0.0.2"), "prober us-east1 127.0.0.2 given twice"},
		{"unknown check property", check("retries 3"), `check web: unknown property "retries"`},
		{"duplicate check name", "healthcheck {\ncheck web\ncheck web\n}", `check "web" defined twice`},
		{"check without name", "healthcheck {\ncheck\n}", "check needs exactly one NAME, got 0 arguments"},
		{"check bad name", "healthcheck {\ncheck we/b\n}", `check name "we/b"`},
		// HC-4: percent 0..100.
		{"percent 101", "healthcheck {\ncheck web\nloadbalancer 10.0.0.1 {\nbackends 10.0.0.2\ncheck web\nthreshold 101\n}\n}", `threshold "101" out of range 0..100`},
		{"percent -1", "healthcheck {\nloadbalancer 10.0.0.1 {\nthreshold -1\n}\n}", `threshold "-1" out of range 0..100`},
		{"vip not ip", "healthcheck {\nloadbalancer www {\n}\n}", `loadbalancer VIP "www" is not an IP address`},
		{"vip twice", "healthcheck {\nloadbalancer 10.0.0.1\nloadbalancer 10.0.0.1\n}", "loadbalancer 10.0.0.1 defined twice"},
		{"backend bad", "healthcheck {\nloadbalancer 10.0.0.1 {\nbackends 10.0.0.2:http\n}\n}", `backend "10.0.0.2:http": not an IP address or IP:PORT`},
		{"backend twice", "healthcheck {\nloadbalancer 10.0.0.1 {\nbackends 10.0.0.2 10.0.0.2\n}\n}", "backend 10.0.0.2 given twice"},
		{"backends no check", "healthcheck {\nloadbalancer 10.0.0.1 {\nbackends 10.0.0.2\n}\n}", "backends need a check NAME"},
		{"backends empty", "healthcheck {\nloadbalancer 10.0.0.1 {\nbackends\n}\n}", "backends needs at least one ADDRESS[:PORT]"},
		{"lb unknown property", "healthcheck {\nloadbalancer 10.0.0.1 {\nweight 3\n}\n}", `unknown property "weight"`},
		{"unknown block property", "healthcheck {\nretries 3\n}", `unknown property "retries"`},
		{"args", "healthcheck web", "healthcheck takes no arguments"},
		{"ready_wait bad", "healthcheck {\nready_wait maybe\n}", `ready_wait "maybe": want on or off`},
		{"log arg", "healthcheck {\nlog all\n}", "Wrong argument count"},
		{"coordinates bad", "healthcheck {\ncoordinates lab 91 0\n}", "latitude \"91\" out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(caddy.NewTestController("dns", tc.input))
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// healthcheck answers no query: the one handler setup adds is where the ready plugin finds it
// (H-2), named healthcheck and asking its Ready, and a query goes straight to the next plugin.
func TestSetupAddsAPassiveHandler(t *testing.T) {
	c := caddy.NewTestController("dns", "healthcheck {\ncheck web {\nprotocol tcp\nport 80\n}\n}")
	if err := setup(c); err != nil {
		t.Fatal(err)
	}
	conf := dnsserver.GetConfig(c)
	if n := len(conf.Plugin); n != 1 {
		t.Fatalf("setup added %d handlers to the chain, want 1", n)
	}
	h := conf.Plugin[0](test.NextHandler(dns.RcodeSuccess, nil))
	if _, ok := h.(interface{ Ready() bool }); !ok || h.Name() != "healthcheck" {
		t.Errorf("handler %T named %q: want one named healthcheck with Ready", h, h.Name())
	}
	if got := fmt.Sprintf("%T", h); got != "*passive.handler" {
		t.Errorf("handler %T: want passive's, which puts no code of healthcheck on the query path", h)
	}
}
