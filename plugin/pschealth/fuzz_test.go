package pschealth

import (
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coresteer/coresteer/plugin/pkg/readme"
)

// FuzzParse: a pschealth block either fails with an error that says where (Testfile:LINE, the
// line of the property) or names the source or composite whose references do not resolve, or
// gives a configuration that keeps every rule parse enforces: policies in range that a source
// can meet (P-1), sources with backends and a defined check (P-2), composites with at least one
// source, none a composite (P-5), each destination claimed once and not a backend (P-4, P-5).
// Seeds: every README example and the shapes of the setup tests.
func FuzzParse(f *testing.F) {
	blocks, err := readme.Directive("README.md", "pschealth")
	if err != nil || len(blocks) == 0 {
		f.Fatalf("README blocks: %v", err)
	}
	for _, s := range append(blocks,
		strings.Replace(twoRegions, "%s", "dry_run", 1),
		"pschealth {\npolicy p min_healthy_percent 60% min_healthy\n}",
		"pschealth {\nsource s {\nbackends [::1]:0 10.0.0.1:99999\n}\n}",
		"pschealth {\ncomposite c {\nsources c\ndestination ::ffff:1.2.3.4\n}\n}",
		"pschealth {\nsource s {\nbackends 10.0.0.1 10.0.0.2:8080 [2001:db8::1]:443\ncheck web\npolicy p\n}\npolicy p min_healthy_percent 0 min_healthy 2\ncomposite c {\nsources s\ndestination 10.200.0.1\n}\n}",
		"pschealth {\nsource s {\nbackends 10.200.0.1\ncheck web\n}\ncomposite c {\nsources s\ndestination 10.200.0.1\n}\n}",
	) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		cfg, err := parse(caddy.NewTestController("dns", in), testChecks)
		if err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, "Testfile:") && !strings.HasPrefix(msg, "source ") && !strings.HasPrefix(msg, "composite ") && !strings.HasPrefix(msg, "no composite") {
				t.Fatalf("%q: the error %q names neither a line nor a source or composite", in, err)
			}
			return
		}
		fail := func(what string, args ...any) {
			t.Helper()
			t.Fatalf("%q parsed, but "+what, append([]any{in}, args...)...)
		}
		if len(cfg.Composites) == 0 {
			fail("with no composite")
		}
		sources := map[*Source]bool{}
		backends := map[string]bool{}
		for _, s := range cfg.Sources {
			p := s.Policy
			switch {
			case len(s.Backends) == 0 || !testChecks.HasCheck(s.Check):
				fail("with source %q without backends or a defined check (P-2)", s.Name)
			case p.MinPercent < 0 || p.MinPercent > 100 || p.MinCount < 0 || p.MinCount > len(s.Backends):
				fail("with source %q whose policy %s it can never meet or is out of range (P-1)", s.Name, p)
			}
			sources[s] = true
			for _, k := range s.Backends {
				backends[k.Addr.String()] = true
			}
		}
		dests := map[string]bool{}
		for _, c := range cfg.Composites {
			d := c.Destination.String()
			switch {
			case len(c.Sources) == 0:
				fail("with composite %q without sources", c.Name)
			case !c.Destination.IsValid() || dests[d] || backends[d]:
				fail("with composite %q whose destination %s is invalid, claimed twice or a backend (P-4, P-5)", c.Name, d)
			}
			dests[d] = true
			for _, s := range c.Sources {
				if !sources[s] {
					fail("with composite %q whose source %q is not a source (P-5)", c.Name, s.Name)
				}
			}
		}
	})
}
