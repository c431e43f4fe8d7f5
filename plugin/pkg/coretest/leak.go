package coretest

import "go.uber.org/goleak"

// ServerLoops are goleak options that ignore the serve loops of CoreDNS servers. A reload stops
// the old instance's servers; a miekg/dns server stopped before its serve loop has started
// ("server not started") keeps serving its handed-over socket. That race is in CoreDNS and
// miekg/dns, not in our plugins, and back-to-back reloads in tests hit it: leak tests of our
// plugins add these options so they check our goroutines and not that race.
func ServerLoops() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/coredns/coredns/core/dnsserver.(*Server).Serve"),
		goleak.IgnoreAnyFunction("github.com/coredns/coredns/core/dnsserver.(*Server).ServePacket"),
		goleak.IgnoreAnyFunction("github.com/coredns/caddy.startServers.func2"),
		goleak.IgnoreAnyFunction("github.com/coredns/caddy.startServers.func3"),
	}
}
