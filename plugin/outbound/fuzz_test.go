package outbound

import (
	"context"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
)

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"outbound example.org {\nto 10.0.0.1\n}",
		"outbound example.org {\nto 10.0.0.1:53 10.0.0.2\nendpoint eu europe-west1 10.1.0.0/24\nregion europe-west1\n}",
		"outbound . {\nto resolvers.example.com:5353\nprivate 127.0.0.0/8\nexcept a.b\n}",
		"outbound example.org {\nto 10.0.0.1\nsource_address 10.0.0.9\ntimeout 2s\nforce_tcp\nmax_concurrent 3\n}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(_ *testing.T, in string) {
		parse(caddy.NewTestController("dns", in)) // must not panic
	})
}

func FuzzServeDNS(f *testing.F) {
	r := startResolver(f, "127.0.0.50")
	o := newHandler(f, "outbound example. {\nto "+r.addr+"\nprivate 127.0.0.0/8\ntimeout 200ms\n}")
	for _, name := range []string{"a.example.", "nx.example.", "other.org.", "."} {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		b, _ := m.Pack()
		f.Add(b)
	}
	m := new(dns.Msg)
	m.SetQuestion("edns.example.", dns.TypeTXT)
	m.SetEdns0(4096, true)
	b, _ := m.Pack()
	f.Add(b)
	f.Fuzz(func(_ *testing.T, wire []byte) {
		m := new(dns.Msg)
		if err := m.Unpack(wire); err != nil {
			return
		}
		o.ServeDNS(context.Background(), dnstest.NewRecorder(&test.ResponseWriter{}), m) // must not panic
	})
}
