// Package coretest starts real CoreDNS servers from Corefile strings, with the coresteer
// directives placed by the same helper as the coredns binary, for integration tests.
//
// The plugins under test are registered by the test's own imports (a blank import of
// github.com/coresteer/coresteer/plugin/<name>); every in-tree CoreDNS plugin is loaded here.
package coretest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coredns/caddy"
	_ "github.com/coredns/coredns/core" // Hook in CoreDNS.
	"github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/core/plugin" // Every in-tree CoreDNS plugin.
	"github.com/coresteer/coresteer/plugin/pkg/chain"

	"github.com/miekg/dns"
)

var mu sync.Mutex

// Server is a running CoreDNS instance.
type Server struct {
	mu   sync.Mutex
	inst *caddy.Instance
	// UDP and TCP are the addresses of the first server block's listeners.
	UDP, TCP string
}

type input string

func (i input) Body() []byte       { return []byte(i) }
func (i input) Path() string       { return "Corefile" }
func (i input) ServerType() string { return "dns" }

// New starts a server from corefile. Use Start in tests; New is for callers that handle the
// error themselves (a test that expects the Corefile to be refused).
func New(corefile string) (*Server, error) {
	mu.Lock()
	defer mu.Unlock()
	chain.Install()
	caddy.Quiet = true
	dnsserver.Quiet = true
	inst, err := caddy.Start(input(corefile))
	if err != nil {
		// A start that fails after some OnStartup hooks ran leaves what they started (probes,
		// board entries) behind; the coredns process exits there, a test process goes on, so do
		// what the exit would: run the shutdown hooks (ours are no-ops when never started).
		if inst != nil {
			inst.ShutdownCallbacks()
		}
		return nil, err
	}
	s := &Server{inst: inst}
	s.UDP, s.TCP = ports(inst, 0)
	return s, nil
}

// Start starts a server from corefile and stops it, with its shutdown callbacks, when t ends.
func Start(tb testing.TB, corefile string) *Server {
	tb.Helper()
	s, err := New(corefile)
	if err != nil {
		tb.Fatalf("starting CoreDNS: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

func ports(i *caddy.Instance, k int) (udp, tcp string) {
	srvs := i.Servers()
	if len(srvs) < k+1 {
		return "", ""
	}
	if u := srvs[k].LocalAddr(); u != nil {
		udp = u.String()
	}
	if a := srvs[k].Addr(); a != nil {
		tcp = a.String()
	}
	return udp, tcp
}

// Ports returns the UDP and TCP addresses of server block k.
func (s *Server) Ports(k int) (udp, tcp string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ports(s.inst, k)
}

// Reload replaces the Corefile the way a SIGUSR1 or the reload plugin does: the new instance
// starts, then the old one stops and runs its shutdown callbacks. On error the old one keeps
// serving. Listeners are handed over, so UDP and TCP stay the same.
func (s *Server) Reload(corefile string) error {
	mu.Lock()
	defer mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	inst, err := s.inst.Restart(input(corefile))
	if err != nil {
		return err
	}
	s.inst = inst
	return nil
}

// Instance returns the running caddy instance.
func (s *Server) Instance() *caddy.Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inst
}

// Stop stops the servers and runs every shutdown callback, so plugins release what they hold
// (probes, sockets, board entries) as they would on process exit.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inst == nil {
		return
	}
	_ = s.inst.Stop()
	s.inst.ShutdownCallbacks()
	s.inst = nil
}

// Exchange sends m to the server over UDP and returns the answer.
func (s *Server) Exchange(m *dns.Msg) (*dns.Msg, error) {
	c := &dns.Client{Timeout: 5 * time.Second}
	r, _, err := c.Exchange(m, s.UDP)
	return r, err
}

// Query asks the server for name and qtype over UDP.
func (s *Server) Query(name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	r, err := s.Exchange(m)
	if err != nil {
		return nil, fmt.Errorf("query %s %s: %w", name, dns.TypeToString[qtype], err)
	}
	return r, nil
}

// QueryFrom asks for name and qtype from a client bound to the local address from (a 127.x.y.z
// address on Linux), so tests can be clients in different subnets.
func (s *Server) QueryFrom(from, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Timeout: 5 * time.Second, Dialer: dialerFrom(from)}
	r, _, err := c.Exchange(m, s.UDP)
	if err != nil {
		return nil, fmt.Errorf("query %s %s from %s: %w", name, dns.TypeToString[qtype], from, err)
	}
	return r, nil
}
