package main

import (
	"bufio"
	"fmt"
	"os"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/metrics" // prometheus
	_ "github.com/coresteer/coresteer/plugin/healthcheck"
	"github.com/coresteer/coresteer/plugin/pkg/chain"
	_ "github.com/coresteer/coresteer/plugin/routingpolicy"
)

type corefile string

func (c corefile) Body() []byte       { return []byte(c) }
func (c corefile) Path() string       { return "Corefile" }
func (c corefile) ServerType() string { return "dns" }

// replicaMain serves the Corefile at path with a real CoreDNS server (only the plugins the
// measurement needs are built in) until its standard input closes: one replica of the fleet.
func replicaMain(path string) int {
	b, err := os.ReadFile(path) //nolint:gosec // the Corefile the driver wrote
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	chain.Install()
	caddy.Quiet = true
	dnsserver.Quiet = true
	inst, err := caddy.Start(corefile(b))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
	}
	_ = inst.Stop()
	inst.ShutdownCallbacks()
	return 0
}
