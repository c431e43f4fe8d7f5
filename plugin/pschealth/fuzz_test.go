package pschealth

import (
	"strings"
	"testing"

	"github.com/coredns/caddy"
)

// Parsing never panics, whatever the input.
func FuzzParse(f *testing.F) {
	f.Add(strings.Replace(twoRegions, "%s", "dry_run", 1))
	f.Add("pschealth {\npolicy p min_healthy_percent 60% min_healthy\n}")
	f.Add("pschealth {\nsource s {\nbackends [::1]:0 10.0.0.1:99999\n}\n}")
	f.Add("pschealth {\ncomposite c {\nsources c\ndestination ::ffff:1.2.3.4\n}\n}")
	f.Fuzz(func(_ *testing.T, in string) {
		_, _ = parse(caddy.NewTestController("dns", in), testChecks)
	})
}
