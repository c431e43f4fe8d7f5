// Command coredns is CoreDNS with every in-tree plugin and the coresteer plugins, placed in the
// chain by plugin/pkg/chain. cmd/coredns-slim is the same with only what a cluster DNS needs.
package main

import (
	_ "github.com/coredns/coredns/core/plugin" // Every in-tree CoreDNS plugin.

	"github.com/coresteer/coresteer/cmd/internal/server"
)

func main() { server.Run() }
