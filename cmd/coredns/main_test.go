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
