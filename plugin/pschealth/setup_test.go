package pschealth

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	"github.com/miekg/dns"
)

type fakeChecks map[string]bool

func (f fakeChecks) HasCheck(n string) bool { return f[n] }
func (f fakeChecks) Checks() []string       { return keys(f) }

var testChecks = fakeChecks{"web": true, "db": true}

// P-1, P-2, P-4: policies with their defaults, sources (backends, check, policy), composites with
// their destination; definitions in any order.
func TestParse(t *testing.T) {
	in := `pschealth {
		policy strict min_healthy_percent 75% min_healthy 2
		policy loose min_healthy 0 min_healthy_percent 0
		composite svc-a {
			sources web-a db-a
			destination 10.0.0.10
		}
		source web-a {
			backends 10.1.0.1 10.1.0.2:8080 [fd00::1]:443
			backends fd00::2
			check web
			policy strict
		}
		source db-a {
			backends 10.1.1.1
			check db
		}
		dry_run
	}`
	cfg, err := parse(caddy.NewTestController("dns", in), testChecks)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.DryRun {
		t.Error("dry_run not set")
	}
	if len(cfg.Composites) != 1 || len(cfg.Sources) != 2 {
		t.Fatalf("got %d composites, %d sources", len(cfg.Composites), len(cfg.Sources))
	}
	comp := cfg.Composites[0]
	if comp.Destination != netip.MustParseAddr("10.0.0.10") || len(comp.Sources) != 2 || comp.Sources[0].Name != "web-a" {
		t.Errorf("composite = %+v", comp)
	}
	web := cfg.Sources[1]
	if web.Name != "web-a" {
		web = cfg.Sources[0]
	}
	want := []health.Key{
		{Check: "web", Addr: netip.MustParseAddr("10.1.0.1")},
		{Check: "web", Addr: netip.MustParseAddr("10.1.0.2"), Port: 8080},
		{Check: "web", Addr: netip.MustParseAddr("fd00::1"), Port: 443},
		{Check: "web", Addr: netip.MustParseAddr("fd00::2")},
	}
	if len(web.Backends) != len(want) {
		t.Fatalf("backends = %v", web.Backends)
	}
	for i := range want {
		if web.Backends[i] != want[i] {
			t.Errorf("backend %d = %v, want %v", i, web.Backends[i], want[i])
		}
	}
	if web.Policy != (Policy{Name: "strict", MinPercent: 75, MinCount: 2}) {
		t.Errorf("web-a policy = %+v", web.Policy)
	}
	if db := comp.Sources[1]; db.Policy != DefaultPolicy() {
		t.Errorf("db-a policy = %+v, want the built-in 60 %% / 1 (P-1)", db.Policy)
	}
}

// Every bad input is an error naming the property, the value and what is allowed; P-5: a
// composite as a source, unknown names, a destination claimed twice, a source with no backends,
// and the one possible cycle (a backend that is a destination) are configuration errors.
func TestParseErrors(t *testing.T) {
	const src = "source s { \n backends 10.0.0.1 10.0.0.2 \n check web \n }\n"
	const comp = "composite c { \n sources s \n destination 10.9.0.1 \n }\n"
	block := func(body string) string { return "pschealth {\n" + body + "\n}" }
	tests := []struct {
		name, in, err string
	}{
		{"args", "pschealth foo {\n" + src + comp + "}", "Wrong argument count"},
		{"unknown property", block(src + comp + "frobnicate"), `unknown property "frobnicate" (allowed: policy, source, composite, dry_run)`},
		{"dry_run value", block(src + comp + "dry_run yes"), `dry_run takes no value, got "yes"`},
		{"no composite", block(src), "no composite defined"},
		{"empty", "pschealth", "no composite defined"},

		// Policies.
		{"policy no name", block("policy"), "policy needs a name"},
		{"policy reserved", block("policy default min_healthy 2"), `policy name "default" is reserved`},
		{"policy dup", block("policy p\npolicy p"), `policy "p" defined twice`},
		{"percent too big", block("policy p min_healthy_percent 101"), `min_healthy_percent "101" is not an integer in 0..100`},
		{"percent negative", block("policy p min_healthy_percent -1"), `min_healthy_percent "-1" is not an integer in 0..100`},
		{"percent not int", block("policy p min_healthy_percent 60.5"), `min_healthy_percent "60.5" is not an integer in 0..100`},
		{"count negative", block("policy p min_healthy -2"), `min_healthy "-2" is not an integer in 0..10000`},
		{"count text", block("policy p min_healthy two"), `min_healthy "two" is not an integer`},
		{"policy missing value", block("policy p min_healthy"), `policy "p": min_healthy needs a value`},
		{"policy twice prop", block("policy p min_healthy 1 min_healthy 2"), `policy "p": min_healthy given twice`},
		{"policy unknown prop", block("policy p max_healthy 1"), `policy "p": unknown property "max_healthy" (allowed: min_healthy_percent, min_healthy)`},

		// Sources (P-2, P-5).
		{"source no name", block("source {\nbackends 10.0.0.1\ncheck web\n}\n" + comp), "source needs exactly one name"},
		{"source no backends", block("source s {\ncheck web\n}\n" + comp), `source "s" has no backends`},
		{"source empty backends", block("source s {\nbackends\ncheck web\n}\n" + comp), `source "s": backends needs at least one ADDRESS[:PORT]`},
		{"source no check", block("source s {\nbackends 10.0.0.1\n}\n" + comp), `source "s" has no check`},
		{"source bad backend", block("source s {\nbackends 10.0.0.300\ncheck web\n}\n" + comp), `source "s": backends "10.0.0.300": not an IP address or IP:PORT`},
		{"source hostname backend", block("source s {\nbackends web.example.org\ncheck web\n}\n" + comp), `backends "web.example.org": not an IP address`},
		{"source port 0", block("source s {\nbackends 10.0.0.1:0\ncheck web\n}\n" + comp), `port 0 is not allowed`},
		{"source unspecified", block("source s {\nbackends 0.0.0.0\ncheck web\n}\n" + comp), `unspecified address is not allowed`},
		{"source dup backend", block("source s {\nbackends 10.0.0.1 10.0.0.1\ncheck web\n}\n" + comp), `source "s": backend "10.0.0.1" listed twice`},
		{"source unknown check", block("source s {\nbackends 10.0.0.1\ncheck nope\n}\n" + comp), `source "s": check "nope" is not defined by healthcheck (defined: db, web)`},
		{"source check twice", block("source s {\nbackends 10.0.0.1\ncheck web\ncheck db\n}\n" + comp), `source "s": check given twice`},
		{"source unknown policy", block("source s {\nbackends 10.0.0.1\ncheck web\npolicy nope\n}\n" + comp), `source "s": unknown policy "nope" (defined: none)`},
		{"source unknown prop", block("source s {\nbackends 10.0.0.1\ncheck web\nweight 3\n}\n" + comp), `source "s": unknown property "weight" (allowed: backends, check, policy)`},
		{"source min above backends", block("policy p min_healthy 3\nsource s {\nbackends 10.0.0.1 10.0.0.2\ncheck web\npolicy p\n}\n" + comp), `source "s": policy "p" (min_healthy_percent 60, min_healthy 3) needs 3 healthy backends but the source has only 2`},
		{"source dup", block(src + src + comp), `source "s": name already used`},

		// Composites (P-3, P-4, P-5).
		{"composite no name", block(src + "composite {\nsources s\ndestination 10.9.0.1\n}"), "composite needs exactly one name"},
		{"composite no sources", block(src + "composite c {\ndestination 10.9.0.1\n}"), `composite "c" has no sources`},
		{"composite no destination", block(src + "composite c {\nsources s\n}"), `composite "c" has no destination`},
		{"composite destination port", block(src + "composite c {\nsources s\ndestination 10.9.0.1:53\n}"), `composite "c": destination "10.9.0.1:53" is not an IP address`},
		{"composite destination twice", block(src + "composite c {\nsources s\ndestination 10.9.0.1\ndestination 10.9.0.2\n}"), `composite "c": destination given twice`},
		{"composite unknown source", block(src + "composite c {\nsources s nope\ndestination 10.9.0.1\n}"), `composite "c": unknown source "nope" (defined: s)`},
		{"composite source twice", block(src + "composite c {\nsources s s\ndestination 10.9.0.1\n}"), `composite "c": source "s" listed twice`},
		{"composite unknown prop", block(src + "composite c {\nsources s\ndestination 10.9.0.1\nttl 5\n}"), `composite "c": unknown property "ttl"`},
		{"composite as source", block(src + comp + "composite d {\nsources s c\ndestination 10.9.0.2\n}"), `composite "d": "c" is a composite and a composite cannot be a source of another composite`},
		{"destination claimed twice", block(src + comp + "composite d {\nsources s\ndestination 10.9.0.1\n}"), `composite "d": destination 10.9.0.1 is already the destination of composite "c"`},
		{"destination claimed twice v4in6", block(src + comp + "composite d {\nsources s\ndestination ::ffff:10.9.0.1\n}"), `destination 10.9.0.1 is already the destination of composite "c"`},
		{"composite name clash", block(src + comp + "composite s {\nsources s\ndestination 10.9.0.2\n}"), `composite "s": name already used`},
		{"cycle backend is destination", block("source s {\nbackends 10.9.0.1\ncheck web\n}\n" + comp), `source "s": backend 10.9.0.1 is the destination of composite "c"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(caddy.NewTestController("dns", tc.in), testChecks)
			if err == nil {
				t.Fatalf("expected error containing %q, got none", tc.err)
			}
			if !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %q does not contain %q", err, tc.err)
			}
		})
	}
}

// P-5 across server blocks: names and destinations are unique in the whole Corefile, and a
// backend of one block cannot be the destination of another.
func TestRegistryAcrossBlocks(t *testing.T) {
	mk := func(in string) *Config {
		t.Helper()
		cfg, err := parse(caddy.NewTestController("dns", in), testChecks)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	first := mk("pschealth {\nsource s {\nbackends 10.0.0.1\ncheck web\n}\ncomposite c {\nsources s\ndestination 10.9.0.1\n}\n}")
	tests := []struct {
		name, in, err string
	}{
		{"same destination", "pschealth {\nsource s2 {\nbackends 10.0.0.1\ncheck web\n}\ncomposite c2 {\nsources s2\ndestination 10.9.0.1\n}\n}",
			`composite "c2": destination 10.9.0.1 is already the destination of composite "c"`},
		{"same source name", "pschealth {\nsource s {\nbackends 10.0.0.1\ncheck web\n}\ncomposite c2 {\nsources s\ndestination 10.9.0.2\n}\n}",
			`source "s": name already defined in another pschealth block`},
		{"same composite name", "pschealth {\nsource s2 {\nbackends 10.0.0.1\ncheck web\n}\ncomposite c {\nsources s2\ndestination 10.9.0.2\n}\n}",
			`composite "c": name already defined in another pschealth block`},
		{"backend is other destination", "pschealth {\nsource s2 {\nbackends 10.9.0.1\ncheck web\n}\ncomposite c2 {\nsources s2\ndestination 10.9.0.2\n}\n}",
			`source "s2": backend 10.9.0.1 is the destination of composite "c"`},
		{"destination is other backend", "pschealth {\nsource s2 {\nbackends 10.0.0.5\ncheck web\n}\ncomposite c2 {\nsources s2\ndestination 10.0.0.1\n}\n}",
			`composite "c2": destination 10.0.0.1 is a backend of source "s"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &registry{names: map[string]bool{}, dests: map[netip.Addr]string{}, backends: map[netip.Addr]string{}}
			if err := r.claim(first); err != nil {
				t.Fatal(err)
			}
			err := r.claim(mk(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("claim error = %v, want %q", err, tc.err)
			}
		})
	}
	ok := mk("pschealth {\nsource s2 {\nbackends 10.0.0.1\ncheck web\n}\ncomposite c2 {\nsources s2\ndestination 10.9.0.2\n}\n}")
	r := &registry{names: map[string]bool{}, dests: map[netip.Addr]string{}, backends: map[netip.Addr]string{}}
	if err := r.claim(first); err != nil {
		t.Fatal(err)
	}
	if err := r.claim(ok); err != nil {
		t.Errorf("a second block sharing only a backend: %v", err)
	}
}

// setup through a controller: the check must be defined by healthcheck (DemandOf), and the
// backends are wanted from healthcheck with the source's check (port 0 = the check's port), from
// startup to shutdown (H-6); setup itself takes nothing.
func TestSetupWantsBackends(t *testing.T) {
	c := caddy.NewTestController("dns", "pschealth {\nsource s {\nbackends 127.0.0.1 127.0.0.2:8080\ncheck web\n}\ncomposite c {\nsources s\ndestination 127.0.9.1\n}\n}")
	if err := setup(c); err == nil || !strings.Contains(err.Error(), `check "web" is not defined by healthcheck (defined: none)`) {
		t.Fatalf("setup without the check: %v", err)
	}
	c = caddy.NewTestController("dns", "pschealth {\nsource s {\nbackends 127.0.0.1 127.0.0.2:8080\ncheck web\n}\ncomposite c {\nsources s\ndestination 127.0.9.1\n}\n}")
	d := health.DemandOf(c)
	d.DefineCheck("web")
	p, err := setupBlock(c)
	if err != nil {
		t.Fatal(err)
	}
	// pschealth answers no query: its one handler is passive's, where ready finds it and that
	// adds no step to the query path.
	if hs := dnsserver.GetConfig(c).Plugin; len(hs) != 1 {
		t.Errorf("setup added %d handlers to the chain, want 1", len(hs))
	} else if h := hs[0](test.NextHandler(dns.RcodeSuccess, nil)); fmt.Sprintf("%T", h) != "*passive.handler" || h.Name() != pluginName {
		t.Errorf("handler %T named %q: want passive's, named %s", h, h.Name(), pluginName)
	} else {
		// ready asks the handler: it must answer what the instance says.
		r := h.(interface{ Ready() bool })
		for _, want := range []bool{false, true, false} {
			p.ready.Store(want)
			if r.Ready() != want {
				t.Errorf("the handler's Ready() = %v while the instance's is %v", r.Ready(), want)
			}
		}
	}
	probed := serve(t, d, "web")
	if len(probed) != 0 {
		t.Fatalf("setup wanted %v", probed)
	}
	p.board, p.memory = health.NewBoard(time.Now), health.NewBoard(time.Now)
	if err := p.OnStartup(); err != nil {
		t.Fatal(err)
	}
	want := []health.Key{
		{Check: "web", Addr: netip.MustParseAddr("127.0.0.1")},
		{Check: "web", Addr: netip.MustParseAddr("127.0.0.2"), Port: 8080},
	}
	if len(probed) != len(want) || probed[want[0]] != 1 || probed[want[1]] != 1 {
		t.Errorf("probed = %v, want %v", probed, want)
	}
	if err := p.OnShutdown(); err != nil {
		t.Fatal(err)
	}
	if len(probed) != 0 {
		t.Errorf("probed after shutdown: %v", probed)
	}
}

// serve plays healthcheck for checks on d: it records the pairs d has it probe.
func serve(t *testing.T, d *health.Demand, checks ...string) map[health.Key]int {
	t.Helper()
	probed := map[health.Key]int{}
	for _, ck := range checks {
		t.Cleanup(d.Serve(ck, func(k health.Key) func() {
			probed[k]++
			return func() {
				if probed[k]--; probed[k] == 0 {
					delete(probed, k)
				}
			}
		}))
	}
	return probed
}
