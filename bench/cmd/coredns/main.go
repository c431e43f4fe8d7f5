// Command coredns is the benchmark's fallback build: cmd/coredns plus blank imports of the four
// coresteer plugins, for a tree where cmd/coredns does not import them yet. bench/run uses
// ./cmd/coredns when its binary lists dns.routingpolicy (see `coredns -plugins`), and this otherwise,
// and says which one it measured in RESULTS.md.
package main

import (
	"github.com/coredns/caddy"
	_ "github.com/coredns/coredns/core/plugin" // Every in-tree CoreDNS plugin.
	"github.com/coredns/coredns/coremain"

	_ "github.com/coresteer/coresteer/plugin/healthcheck"
	_ "github.com/coresteer/coresteer/plugin/outbound"
	"github.com/coresteer/coresteer/plugin/pkg/chain"
	"github.com/coresteer/coresteer/plugin/pkg/version"
	_ "github.com/coresteer/coresteer/plugin/pschealth"
	_ "github.com/coresteer/coresteer/plugin/routingpolicy"
)

func main() {
	chain.Install()
	caddy.AppVersion = coremain.CoreVersion + " (" + version.String() + ")"
	coremain.Run()
}
