// Package server starts CoreDNS with the coresteer plugins registered and their directives in the
// chain. The full build (cmd/coredns) and the slim build (cmd/coredns-slim) import it and differ
// only in the CoreDNS plugins they import.
package server

import (
	"github.com/coredns/caddy"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coresteer/coresteer/plugin/healthcheck" // registers the healthcheck directive
	_ "github.com/coresteer/coresteer/plugin/outbound"    // registers the outbound directive
	"github.com/coresteer/coresteer/plugin/pkg/chain"
	"github.com/coresteer/coresteer/plugin/pkg/version"
	_ "github.com/coresteer/coresteer/plugin/pschealth"     // registers the pschealth directive
	_ "github.com/coresteer/coresteer/plugin/routingpolicy" // registers the routingpolicy directive
	_ "github.com/coresteer/coresteer/plugin/status"        // registers the status directive
	_ "github.com/coresteer/coresteer/plugin/udpbatch"      // registers the udpbatch directive
)

// Run places our directives in the chain, names the suite in -version and runs CoreDNS.
func Run() {
	chain.Install()
	SetVersion()
	coremain.Run()
}

// SetVersion makes `coredns -version` print CoreDNS's version and the suite's:
// "CoreDNS-1.15.0 (coresteer VERSION)".
func SetVersion() {
	caddy.AppVersion = coremain.CoreVersion + " (" + version.String() + ")"
}
