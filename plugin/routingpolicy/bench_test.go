package routingpolicy

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/file"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"

	"github.com/miekg/dns"
)

const benchZone = `$ORIGIN example.org.
@ 3600 IN SOA ns1 hostmaster 1 7200 1800 1209600 60
@ 3600 IN NS ns1
ns1 300 IN A 192.0.2.53
www 60 IN A 10.0.0.1
`

// BenchmarkServeDNS compares routingpolicy's policies with CoreDNS's file plugin answering an
// equivalent static record, in the same run. Each query goes through what a server adds around the
// plugin: the ScrubWriter CoreDNS wraps every query's writer in (EDNS0 echo, truncation) and the
// packing of the answer, as miekg/dns's writer does (serverWriter). The -edns variants ask with an
// EDNS0 buffer of 1232 octets and the DO bit, as resolvers do.
func BenchmarkServeDNS(b *testing.B) {
	z, err := file.Parse(strings.NewReader(benchZone), "example.org.", "bench", 0)
	if err != nil {
		b.Fatal(err)
	}
	f := file.File{Zones: file.Zones{Z: map[string]*file.Zone{"example.org.": z}, Names: []string{"example.org."}}}

	rp, _ := newTest(b, `routingpolicy example.org {
		region us-east1
		subnet europe-west2 10.2.0.0/16
		record www-static A 60 10.0.0.1
		wrr www-wrr A 60 "25=10.0.0.1;75=10.0.0.2" healthcheck web
		geo www-geo A 60 "us-east1=10.0.0.1;europe-west2=10.0.0.2;asia-northeast1=10.0.0.3" healthcheck web
		failover www-fo A 60 "10.0.0.1" "us-east1=10.0.0.2;europe-west2=10.0.0.3" trickle 0.1 healthcheck web
	}`)
	w := newServerWriter("10.1.1.1")
	run := func(name string, h interface {
		ServeDNS(context.Context, dns.ResponseWriter, *dns.Msg) (int, error)
	}, qname string) {
		for _, edns := range []bool{false, true} {
			label := name
			if edns {
				label += "-edns"
			}
			b.Run(label, func(b *testing.B) {
				m := new(dns.Msg)
				m.SetQuestion(qname, dns.TypeA)
				if edns {
					m.SetEdns0(1232, true)
				}
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					if _, err := h.ServeDNS(ctx, request.NewScrubWriter(m, w), m); err != nil {
						b.Fatal(err)
					}
				}
				if len(w.last) == 0 {
					b.Fatal("no answer written")
				}
			})
		}
	}
	run("file/static", f, "www.example.org.")
	run("routingpolicy/static", rp, "www-static.example.org.")
	run("routingpolicy/wrr", rp, "www-wrr.example.org.")
	run("routingpolicy/geo", rp, "www-geo.example.org.")
	run("routingpolicy/failover", rp, "www-fo.example.org.")
	// Behind a plugin that passes the query on with plugin.NextOrFailure (errors, metadata...),
	// which wraps the writer (one allocation of CoreDNS's). healthcheck and pschealth no longer
	// do: their handler is the next plugin's (plugin/pkg/passive).
	run("routingpolicy/geo-behind-errors", &stub{name: "errors", next: rp}, "www-geo.example.org.")
}

// BenchmarkServeDNSZoneShapes measures the answers of the zone rules (R-ZONE-1, R-ZONE-2): plain
// data, MX with additional data, a referral, a wildcard, a policy on a wildcard, a DNAME, NXDOMAIN,
// a deep name that does not exist, the apex NS set with glue.
func BenchmarkServeDNSZoneShapes(b *testing.B) {
	rp, _ := newTest(b, `routingpolicy example.org {
		record www A 60 10.0.0.1
		record mx MX 60 10 www
		record sub NS 60 ns.sub
		record ns.sub A 60 192.0.2.1
		record *.wild A 60 192.0.2.2
		wrr *.pol A 60 "1=10.0.0.1;1=10.0.0.2"
		record dn DNAME 60 wild.example.org.
		record a.b.c.d.e A 60 10.0.0.3
	}`)
	w := newServerWriter("10.1.1.1")
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{"www.example.org.", dns.TypeA}, {"mx.example.org.", dns.TypeMX}, {"x.sub.example.org.", dns.TypeA}, {"x.wild.example.org.", dns.TypeA},
		{"x.pol.example.org.", dns.TypeA}, {"x.dn.example.org.", dns.TypeA}, {"nx.example.org.", dns.TypeA}, {"z.y.x.a.b.c.d.e.example.org.", dns.TypeA}, {"example.org.", dns.TypeNS}} {
		b.Run(q.name+"/"+dns.TypeToString[q.qtype], func(b *testing.B) {
			m := new(dns.Msg)
			m.SetQuestion(q.name, q.qtype)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				rp.ServeDNS(ctx, request.NewScrubWriter(m, w), m)
			}
		})
	}
}

// fixedAddrWriter returns a fixed client address. A real server's writer returns the address it
// already has; test.ResponseWriter parses one on every call, which would count two allocations
// against geo and failover.
type fixedAddrWriter struct {
	test.ResponseWriter
	addr net.Addr
}

func (w *fixedAddrWriter) RemoteAddr() net.Addr { return w.addr }
