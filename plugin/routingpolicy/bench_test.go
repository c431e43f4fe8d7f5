package routingpolicy

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/file"
	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
)

const benchZone = `$ORIGIN example.org.
@ 3600 IN SOA ns1 hostmaster 1 7200 1800 1209600 60
@ 3600 IN NS ns1
ns1 300 IN A 192.0.2.53
www 60 IN A 10.0.0.1
`

// BenchmarkServeDNS compares routingpolicy's policies with CoreDNS's file plugin answering an
// equivalent static record, in the same run.
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
	// A real server's writer returns the client address it already has; test.ResponseWriter
	// parses one on every call, which would count two allocations against geo and failover.
	w := &fixedAddrWriter{addr: &net.UDPAddr{IP: net.ParseIP("10.1.1.1"), Port: 40212}}
	run := func(name string, h interface {
		ServeDNS(context.Context, dns.ResponseWriter, *dns.Msg) (int, error)
	}, qname string) {
		b.Run(name, func(b *testing.B) {
			m := new(dns.Msg)
			m.SetQuestion(qname, dns.TypeA)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := h.ServeDNS(ctx, w, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	run("file/static", f, "www.example.org.")
	run("routingpolicy/static", rp, "www-static.example.org.")
	run("routingpolicy/wrr", rp, "www-wrr.example.org.")
	run("routingpolicy/geo", rp, "www-geo.example.org.")
	run("routingpolicy/failover", rp, "www-fo.example.org.")
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
	w := &fixedAddrWriter{addr: &net.UDPAddr{IP: net.ParseIP("10.1.1.1"), Port: 40212}}
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
				rp.ServeDNS(ctx, w, m)
			}
		})
	}
}

type fixedAddrWriter struct {
	test.ResponseWriter
	addr net.Addr
}

func (w *fixedAddrWriter) RemoteAddr() net.Addr { return w.addr }
