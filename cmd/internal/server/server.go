// Package server starts CoreDNS with the coresteer directives in the chain. The full build
// (cmd/coredns) and the slim build (cmd/coredns-slim) differ only in the plugins they import.
package server

import (
	"github.com/coredns/caddy"
	"github.com/coredns/coredns/coremain"

	"github.com/coresteer/coresteer/plugin/pkg/chain"
	"github.com/coresteer/coresteer/plugin/pkg/version"
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
