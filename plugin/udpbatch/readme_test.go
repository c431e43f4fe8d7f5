package udpbatch

import (
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/caddy/caddyfile"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coresteer/coresteer/plugin/pkg/chain"
	"github.com/coresteer/coresteer/plugin/pkg/readme"
)

// Every `~~~ corefile` snippet of README.md parses, and its udpbatch directive with parse.
func TestReadme(t *testing.T) {
	snippets, err := readme.Snippets("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(snippets) == 0 {
		t.Fatal("no ~~~ corefile snippet in README.md")
	}
	directives, err := chain.Order(dnsserver.Directives)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snippets {
		blocks, err := caddyfile.Parse("README.md", strings.NewReader(s.Text), directives)
		if err != nil {
			t.Errorf("README.md:%d: %v", s.Line, err)
			continue
		}
		found := false
		for _, b := range blocks {
			toks, ok := b.Tokens[pluginName]
			if !ok {
				continue
			}
			found = true
			c := caddy.NewTestController("dns", "")
			c.Dispenser = caddyfile.NewDispenserTokens("README.md", toks)
			c.ServerBlockKeys = b.Keys
			if _, err := parse(c); err != nil {
				t.Errorf("README.md:%d: %v", s.Line, err)
			}
		}
		if !found {
			t.Errorf("README.md:%d: snippet without udpbatch", s.Line)
		}
	}
}
