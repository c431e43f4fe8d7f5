// Command coredns is CoreDNS with every in-tree plugin and the coresteer plugins, placed in the
// chain by plugin/pkg/chain.
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
	_ "github.com/coresteer/coresteer/plugin/status"
)

func main() {
	chain.Install()
	setVersion()
	coremain.Run()
}

// setVersion makes `coredns -version` print CoreDNS's version and the suite's:
// "CoreDNS-1.15.0 (coresteer VERSION)".
func setVersion() {
	caddy.AppVersion = coremain.CoreVersion + " (" + version.String() + ")"
}
