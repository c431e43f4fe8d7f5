package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coresteer/coresteer/plugin/pkg/chain"
)

// `coredns -plugins` lists our plugins: this binary registers them.
func TestPluginsListed(t *testing.T) {
	listed := strings.Fields(caddy.DescribePlugins())
	for _, name := range chain.Names() {
		if !slices.Contains(listed, name) {
			t.Errorf("-plugins does not list %s", name)
		}
	}
}

// `coredns -version` names the suite and its version next to CoreDNS's.
func TestVersion(t *testing.T) {
	setVersion()
	if !strings.HasPrefix(caddy.AppVersion, "1.15.0 (coresteer ") {
		t.Fatalf("version %q, want CoreDNS's version and the suite's", caddy.AppVersion)
	}
}
