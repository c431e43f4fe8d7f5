package kubernetes_test

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/coredns/caddy/caddyfile"
	"github.com/coredns/coredns/core/dnsserver"

	"github.com/coresteer/coresteer/plugin/pkg/chain"
)

// parseCorefile parses corefile with the directives of this build (CoreDNS's and ours, in
// chain order), so an unknown or misspelt directive fails here rather than in the cluster.
func parseCorefile(t *testing.T, corefile string) []caddyfile.ServerBlock {
	t.Helper()
	directives, err := chain.Order(dnsserver.Directives)
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := caddyfile.Parse("Corefile", strings.NewReader(corefile), directives)
	if err != nil {
		t.Fatalf("the ConfigMap's Corefile does not parse: %v", err)
	}
	return blocks
}

// args returns the arguments on the line of the first occurrence of directive in b.
func args(b caddyfile.ServerBlock, directive string) (out []string, ok bool) {
	toks, ok := b.Tokens[directive]
	if !ok || len(toks) == 0 {
		return nil, false
	}
	line := toks[0].Line
	for _, tk := range toks[1:] {
		if tk.Line != line || tk.Text == "{" {
			break
		}
		out = append(out, tk.Text)
	}
	return out, true
}

// corefilePorts returns the TCP ports of the health, ready and prometheus listeners of the
// Corefile (their defaults when no address is given), and fails when two server blocks disagree.
func corefilePorts(t *testing.T, corefile string) map[string]int {
	t.Helper()
	defaults := map[string]string{"health": ":8080", "ready": ":8181", "prometheus": "localhost:9153"}
	ports := map[string]int{}
	for _, b := range parseCorefile(t, corefile) {
		for dir, def := range defaults {
			a, ok := args(b, dir)
			if !ok {
				continue
			}
			addr := def
			if len(a) > 0 {
				addr = a[0]
			}
			_, p, err := net.SplitHostPort(addr)
			if err != nil {
				t.Fatalf("%s %q in server block %v: %v", dir, addr, b.Keys, err)
			}
			n, err := strconv.Atoi(p)
			if err != nil {
				t.Fatalf("%s %q in server block %v: port %q", dir, addr, b.Keys, p)
			}
			if old, seen := ports[dir]; seen && old != n {
				t.Fatalf("%s listens on %d in one server block and %d in another", dir, old, n)
			}
			ports[dir] = n
		}
	}
	return ports
}

// The cluster zone is the stock one, and our plugins live in a block of their own.
func TestCorefileKeepsClusterZone(t *testing.T) {
	c := load(t)
	t.Setenv("REGION", "europe-west1")
	blocks := parseCorefile(t, c.configMap.Data["Corefile"])
	var root, steer, corp *caddyfile.ServerBlock
	for i, b := range blocks {
		switch {
		case slices.Contains(b.Keys, ".:53"):
			root = &blocks[i]
		case slices.Contains(b.Keys, "steer.example:53"):
			steer = &blocks[i]
		case slices.Contains(b.Keys, "corp.example:53"):
			corp = &blocks[i]
		}
	}
	// serve_test.go splits the Corefile by text; it must see the blocks the parser sees.
	if n := len(serverBlocks(t, c.configMap.Data["Corefile"])); n != len(blocks) {
		t.Errorf("the text split finds %d server blocks, the parser %d", n, len(blocks))
	}
	if root == nil || steer == nil || corp == nil {
		t.Fatalf("want the blocks .:53, steer.example:53 and corp.example:53, got %d blocks", len(blocks))
	}
	want := map[string]string{
		"kubernetes":  "cluster.local in-addr.arpa ip6.arpa",
		"forward":     ". /etc/resolv.conf",
		"cache":       "30",
		"loop":        "",
		"reload":      "",
		"loadbalance": "",
		"errors":      "",
		"health":      "",
		"ready":       "",
		"prometheus":  ":9153",
	}
	for dir, w := range want {
		a, ok := args(*root, dir)
		if !ok {
			t.Errorf("the .:53 block has no %s", dir)
			continue
		}
		if got := strings.Join(a, " "); got != w {
			t.Errorf("%s %q in the .:53 block, want %q", dir, got, w)
		}
	}
	if toks := root.Tokens["health"]; !slices.ContainsFunc(toks, func(tk caddyfile.Token) bool { return tk.Text == "lameduck" }) {
		t.Error("health has no lameduck in the .:53 block")
	}
	for _, dir := range chain.Names() {
		if _, ok := root.Tokens[dir]; ok {
			t.Errorf("%s in the cluster zone block: keep our plugins in their own block", dir)
		}
	}
	for _, dir := range []string{"routingpolicy", "healthcheck", "ready", "prometheus"} {
		if _, ok := steer.Tokens[dir]; !ok {
			t.Errorf("the example zone block has no %s", dir)
		}
	}
	if _, ok := corp.Tokens["outbound"]; !ok {
		t.Error("the corp.example block has no outbound")
	}
	// {$REGION} is substituted when the Corefile is read.
	if toks := steer.Tokens["routingpolicy"]; !slices.ContainsFunc(toks, func(tk caddyfile.Token) bool { return tk.Text == "europe-west1" }) {
		t.Error("REGION=europe-west1 did not reach the routingpolicy block")
	}
}
