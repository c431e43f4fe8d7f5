package outbound

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
)

// O-9: two views for two client networks, each with its own endpoint, give the resolver two
// distinct source addresses (isolation); a spoke zone names the hub's endpoint declared in
// another block and its queries leave from the hub's source.
func TestViewIsolationAndSharedEndpoint(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	port := coretest.FreePort(t)
	corefile := `example.:` + port + ` {
	bind 127.0.0.1
	view net-a {
		expr incidr(client_ip(), '127.0.1.0/24')
	}
	outbound example. {
		to ` + r.addr + `
		private 127.0.0.0/8
		endpoint a europe-west1 127.0.0.21
		endpoint hub europe-west1 127.0.0.23
	}
}
example.:` + port + ` {
	bind 127.0.0.1
	view net-b {
		expr incidr(client_ip(), '127.0.2.0/24')
	}
	outbound example. {
		to ` + r.addr + `
		private 127.0.0.0/8
		endpoint b europe-west1 127.0.0.22
	}
}
spoke.:` + port + ` {
	bind 127.0.0.1
	outbound spoke. {
		to ` + r.addr + `
		private 127.0.0.0/8
		endpoint hub
	}
}`
	s := coretest.Start(t, corefile)
	for i := range 4 {
		mustQuery(t, s, "127.0.1.1", fmt.Sprintf("a%d.example.", i))
		mustQuery(t, s, "127.0.2.1", fmt.Sprintf("b%d.example.", i))
		mustQuery(t, s, "127.0.2.1", fmt.Sprintf("s%d.spoke.", i))
	}
	got := r.sourceSet()
	want := map[netip.Addr]int{
		netip.MustParseAddr("127.0.0.21"): 4,
		netip.MustParseAddr("127.0.0.22"): 4,
		netip.MustParseAddr("127.0.0.23"): 4,
	}
	for a, n := range want {
		if got[a] != n {
			t.Errorf("O-9: source %s sent %d queries, want %d (all sources %v)", a, got[a], n, got)
		}
	}
	if len(got) != 3 {
		t.Errorf("O-9: unexpected sources %v", got)
	}
}

// O-9: an endpoint named in two blocks is one object with one ranking state per target.
func TestSharedEndpointState(t *testing.T) {
	reg := newRegistry()
	blocks := []string{
		"outbound a.example {\nto 10.0.0.53\nendpoint hub europe-west1 127.0.0.23\n}",
		"outbound b.example {\nto 10.0.0.53\nendpoint hub\n}",
	}
	os := make([]*Outbound, 0, len(blocks))
	for _, in := range blocks {
		o, err := parse(caddy.NewTestController("dns", in))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range o.declared {
			if err := reg.declare(e); err != nil {
				t.Fatal(err)
			}
		}
		os = append(os, o)
	}
	for _, o := range os {
		if err := o.bind(reg); err != nil {
			t.Fatal(err)
		}
		defer o.stop()
	}
	if os[0].rk.pairs[0] != os[1].rk.pairs[0] {
		t.Errorf("O-9: the hub endpoint's pair is not shared between the zones")
	}
}

// A name used but never declared is a startup error that says how to declare it.
func TestUndeclaredEndpoint(t *testing.T) {
	_, err := coretest.New(`example.:0 {
	bind 127.0.0.1
	outbound example. {
		to 10.0.0.53
		endpoint nowhere
	}
}`)
	if err == nil || !strings.Contains(err.Error(), `endpoint "nowhere" is named but declared nowhere`) {
		t.Errorf("undeclared endpoint: %v", err)
	}
	// O-2: a source address this host does not have.
	_, err = coretest.New(`example.:0 {
	bind 127.0.0.1
	outbound example. {
		to 10.0.0.53
		endpoint eu europe-west1 198.51.100.77
	}
}`)
	if err == nil || !strings.Contains(err.Error(), "source 198.51.100.77 is not an address of this host") {
		t.Errorf("O-2 missing source: %v", err)
	}
	_, err = coretest.New(`example.:0 {
	bind 127.0.0.1
	outbound example. {
		to 10.0.0.53
		endpoint eu europe-west1 198.51.100.0/24
	}
}`)
	if err == nil || !strings.Contains(err.Error(), "no address in source range 198.51.100.0/24") {
		t.Errorf("O-2 missing source range: %v", err)
	}
}

// O-8: an FQDN target resolved through this same server for the client's region: a split
// (views on the client's network) in the same server gives clients in two regions two different
// resolvers. Its answer is cached per region; a public address from the FQDN is refused.
func TestFQDNTargetPerRegion(t *testing.T) {
	r1 := startResolver(t, "127.0.0.31")
	r2 := startResolverPort(t, "127.0.0.32", r1.port())
	port := coretest.FreePort(t)
	corefile := `resolvers.corp.:` + port + ` {
	bind 127.0.0.1
	view eu {
		expr incidr(client_ip(), '127.0.1.0/24')
	}
	hosts {
		127.0.0.31 resolvers.corp
		ttl 60
	}
}
resolvers.corp.:` + port + ` {
	bind 127.0.0.1
	view us {
		expr incidr(client_ip(), '127.0.2.0/24')
	}
	hosts {
		127.0.0.32 resolvers.corp
		ttl 60
	}
}
resolvers.corp.:` + port + ` {
	bind 127.0.0.1
	hosts {
		8.8.8.8 resolvers.corp
	}
}
example.:` + port + ` {
	bind 127.0.0.1
	outbound example. {
		to resolvers.corp:` + r1.port() + `
		private 127.0.0.0/8
		endpoint eu europe-west1 127.0.0.11
		subnet europe-west1 127.0.1.0/24
		subnet us-east1 127.0.2.0/24
		subnet asia-east1 127.0.3.0/24
	}
}`
	s := coretest.Start(t, corefile)
	for i := range 3 {
		if m := mustQuery(t, s, "127.0.1.1", fmt.Sprintf("e%d.example.", i)); m.Rcode != dns.RcodeSuccess {
			t.Fatalf("eu client: %s", dns.RcodeToString[m.Rcode])
		}
		if m := mustQuery(t, s, "127.0.2.1", fmt.Sprintf("u%d.example.", i)); m.Rcode != dns.RcodeSuccess {
			t.Fatalf("us client: %s", dns.RcodeToString[m.Rcode])
		}
	}
	if n := r1.clients.Load(); n != 3 {
		t.Errorf("O-8: eu resolver got %d queries, want 3", n)
	}
	if n := r2.clients.Load(); n != 3 {
		t.Errorf("O-8: us resolver got %d queries, want 3", n)
	}
	// asia clients fall in the last block: the FQDN gives a public address, refused (O-1).
	m := new(dns.Msg)
	m.SetQuestion("x.example.", dns.TypeA)
	m.SetEdns0(1232, false)
	c := &dns.Client{Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP("127.0.3.1")}}}
	a, _, err := c.Exchange(m, s.UDP)
	if err != nil {
		t.Fatal(err)
	}
	if a.Rcode != dns.RcodeServerFailure {
		t.Fatalf("O-8/O-1: public FQDN address answered %s, want SERVFAIL", dns.RcodeToString[a.Rcode])
	}
	if e := edeOf(a); e == nil || e.InfoCode != dns.ExtendedErrorCodeNoReachableAuthority || e.ExtraText != textNoAddress {
		t.Errorf("O-8: EDE %v", e)
	}
}

func edeOf(m *dns.Msg) *dns.EDNS0_EDE {
	if o := m.IsEdns0(); o != nil {
		for _, x := range o.Option {
			if e, ok := x.(*dns.EDNS0_EDE); ok {
				return e
			}
		}
	}
	return nil
}

// An FQDN target that nothing earlier in the chain answers comes back to outbound: SERVFAIL,
// not a loop.
func TestFQDNSelfLoop(t *testing.T) {
	s := coretest.Start(t, `example.:0 {
	bind 127.0.0.1
	outbound example. {
		to ns.example
		private 127.0.0.0/8
	}
}`)
	m := mustQuery(t, s, "127.0.0.1", "x.example.")
	if m.Rcode != dns.RcodeServerFailure {
		t.Errorf("self loop: %s", dns.RcodeToString[m.Rcode])
	}
}
