package routingpolicy

import (
	"os"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/caddy/caddyfile"
)

// TestReadme parses the routingpolicy block of every corefile snippet in README.md.
func TestReadme(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var snippets []string
	in := false
	var cur strings.Builder
	for line := range strings.SplitSeq(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "~~~ corefile"):
			in = true
			cur.Reset()
		case in && strings.HasPrefix(line, "~~~"):
			in = false
			snippets = append(snippets, cur.String())
		case in:
			cur.WriteString(line + "\n")
		}
	}
	if len(snippets) == 0 {
		t.Fatal("no corefile snippets")
	}
	parsed := 0
	for i, s := range snippets {
		blocks, err := caddyfile.Parse("README", strings.NewReader(s), []string{"routingpolicy", "healthcheck"})
		if err != nil {
			t.Fatalf("snippet %d: %v", i, err)
		}
		for _, sb := range blocks {
			toks, ok := sb.Tokens["routingpolicy"]
			if !ok {
				continue
			}
			c := caddy.NewTestController("dns", "")
			c.Dispenser = caddyfile.NewDispenserTokens("README", toks)
			c.ServerBlockKeys = sb.Keys
			cfgs, err := parse(c)
			if err != nil {
				t.Fatalf("snippet %d: %v", i, err)
			}
			parsed += len(cfgs)
			for _, cfg := range cfgs {
				// Files named by the examples do not exist here: check the inline data.
				cfg.ZoneFile, cfg.RecordSets = "", ""
				if _, err := cfg.load(fixedNow); err != nil {
					t.Fatalf("snippet %d: %v", i, err)
				}
			}
		}
	}
	if parsed != len(snippets) {
		t.Fatalf("parsed %d routingpolicy blocks in %d snippets", parsed, len(snippets))
	}
}
