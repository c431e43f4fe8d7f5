package outbound

import (
	"net"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/readme"

	"github.com/miekg/dns"
)

// FuzzParse: an outbound block either fails with an error that says where (Testfile:LINE, the
// line of the property), or gives a configuration that keeps every rule parse enforces: zones,
// exactly one kind of target, private IPv4 targets only (O-1), one source mechanism (O-3), the
// endpoint limits (O-4), a timeout in range, except names under the zones, a probe that packs.
// Seeds: every README example and the shapes of the setup tests.
func FuzzParse(f *testing.F) {
	blocks, err := readme.Directive("README.md", "outbound")
	if err != nil || len(blocks) == 0 {
		f.Fatalf("README blocks: %v", err)
	}
	for _, s := range append(blocks,
		"outbound example.org {\nto 10.0.0.1\n}",
		"outbound example.org {\nto 10.0.0.1:53 10.0.0.2\nendpoint eu europe-west1 10.1.0.0/24\nregion europe-west1\n}",
		"outbound . {\nto resolvers.example.com:5353\nprivate 127.0.0.0/8\nexcept a.b\n}",
		"outbound example.org {\nto 10.0.0.1\nsource_address 10.0.0.9\ntimeout 2s\nforce_tcp\nmax_concurrent 3\n}",
		"outbound example.org example.net {\nto 100.64.0.1 192.168.1.1:5353\nendpoint a us-east1 10.0.0.1 10.0.1.0/30\nendpoint b\nprobe corp.example.org. SOA\nsubnet us-east1 10.9.0.0/16\ncoordinates edge 1 2\nexcept x.example.org\n}",
		"outbound {\nto [::1]:53\n}",
		"outbound example.org {\nto 8.8.8.8\n}",
	) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		c := caddy.NewTestController("dns", in)
		c.ServerBlockKeys = []string{"example.org."}
		o, err := parse(c)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "Testfile:") {
				t.Fatalf("%q: the error %q does not say where", in, err)
			}
			return
		}
		fail := func(what string) { t.Helper(); t.Fatalf("%q parsed, but %s", in, what) }
		if len(o.zones) == 0 {
			fail("with no zone")
		}
		if (len(o.targets) == 0) == (o.fqdn == "") {
			fail("not with exactly one kind of target (addresses or one FQDN)")
		}
		for _, a := range o.targets {
			if !a.Addr().Is4() || !o.isPrivate(a.Addr()) || a.Port() == 0 {
				fail("with the target " + a.String() + " (O-1: private IPv4 only)")
			}
		}
		if o.sourceAddress.IsValid() && len(o.endpointNames) > 0 {
			fail("with a source_address and endpoints (O-3)")
		}
		if len(o.endpointNames) > maxPerZone {
			fail("with more endpoints than a zone may have (O-4)")
		}
		for _, e := range o.declared {
			if len(e.Sources) == 0 {
				fail("with an endpoint without a source")
			}
			if _, err := o.loc.Table.Resolve(e.Region); err != nil {
				fail("with an endpoint in an unknown region")
			}
		}
		if o.timeout < minTimeout || o.timeout > maxTimeout {
			fail("with the timeout " + o.timeout.String())
		}
		for _, ex := range o.except {
			if !o.inZones(ex) {
				fail("with except " + ex + " outside the zones")
			}
		}
		if len(o.probeWire) == 0 {
			fail("with no probe message")
		}
	})
}

// FuzzServeDNS: any query a server accepts, for a forwarded zone or not, gets one reply
// (coretest.Serve) that packs and unpacks, has the query's ID and question (O-10) and an rcode a
// forwarder may answer with: the resolver's, or SERVFAIL, REFUSED or FORMERR of its own.
func FuzzServeDNS(f *testing.F) {
	r := startResolver(f, "127.0.0.50")
	o := newHandler(f, "outbound example. {\nto "+r.addr+"\nprivate 127.0.0.0/8\ntimeout 200ms\n}")
	o.Next = coretest.Echo
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"a.example.", dns.TypeA}, {"nx.example.", dns.TypeA}, {"other.org.", dns.TypeA}, {".", dns.TypeNS},
		{"A.ExAmPlE.", dns.TypeAAAA}, {"example.", dns.TypeSOA}, {"a.example.", dns.TypeANY}, {"a.example.", dns.TypeAXFR},
	} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		b, _ := m.Pack()
		f.Add(b)
	}
	m := new(dns.Msg)
	m.SetQuestion("edns.example.", dns.TypeTXT)
	m.SetEdns0(4096, true)
	m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.IPv4(10, 2, 3, 0)})
	b, _ := m.Pack()
	f.Add(b)
	f.Fuzz(func(t *testing.T, wire []byte) {
		coretest.FuzzServe(t, o, wire, "10.2.3.4", dns.RcodeSuccess, dns.RcodeNameError, dns.RcodeServerFailure, dns.RcodeRefused, dns.RcodeFormatError, dns.RcodeNotImplemented)
	})
}
