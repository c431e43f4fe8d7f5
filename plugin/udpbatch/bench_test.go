package udpbatch

import (
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
)

// benchServer starts one server block serving the benchmark zone, with directive ("udpbatch",
// "udpbatch 16", or "" for none), and returns its UDP address.
func benchServer(b *testing.B, directive string) (netip.AddrPort, *coretest.Server) {
	b.Helper()
	srv := coretest.Start(b, `example.org:0 {
	bind 127.0.0.1
	`+directive+`
	file `+zone(b)+`
}`)
	return addrPort(b, srv.UDP), srv
}

var benchConfigs = []struct{ name, directive string }{
	{"plain", ""},
	{"udpbatch", "udpbatch"},
}

// BenchmarkIdleQuery is the round trip of one query at a time: the socket is always idle, so each
// answer leaves alone, at once, sent by its own handler. It must cost what plain costs.
func BenchmarkIdleQuery(b *testing.B) {
	for _, bc := range benchConfigs {
		b.Run(bc.name, func(b *testing.B) {
			to, _ := benchServer(b, bc.directive)
			c := newClient(b, "127.0.0.1")
			q := query(b, 1, "www.example.org.", dns.TypeA, false)
			c.exchange(to, q)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				c.send(to, q)
				if _, _, err := c.read(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLoad keeps clients x window queries in flight (clients = GOMAXPROCS x 8 goroutines,
// each with its own socket and window queries outstanding): ns/op is the inverse of the
// throughput, client included. It reports the mean batch size.
func BenchmarkLoad(b *testing.B) {
	const window = 4
	for _, bc := range benchConfigs {
		b.Run(bc.name, func(b *testing.B) {
			to, srv := benchServer(b, bc.directive)
			warm := newClient(b, "127.0.0.1")
			warm.exchange(to, query(b, 1, "www.example.org.", dns.TypeA, false))
			var s *socket
			var n0, sum0 float64
			if bc.directive != "" {
				s = sockets(b, srv.Instance(), 1)[0]
				n, sum := histogram(b, s)
				n0, sum0 = float64(n), sum
			}
			var failed atomic.Int64
			b.SetParallelism(8)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				c := newClient(b, "127.0.0.1")
				q := query(b, 1, "www.example.org.", dns.TypeA, false)
				inFlight := 0
				for pb.Next() {
					for inFlight < window {
						if _, err := c.conn.WriteToUDPAddrPort(q, to); err != nil {
							failed.Add(1)
						}
						inFlight++
					}
					if _, _, err := c.read(); err != nil {
						failed.Add(1)
						inFlight = 0
						continue
					}
					inFlight--
				}
				for ; inFlight > 0; inFlight-- {
					if _, _, err := c.read(); err != nil {
						break
					}
				}
			})
			b.StopTimer()
			if f := failed.Load(); f > 0 {
				b.Logf("%d queries lost", f)
			}
			if s != nil {
				waitIdle(b, s)
				n, sum := histogram(b, s)
				if calls := float64(n) - n0; calls > 0 {
					b.ReportMetric((sum-sum0)/calls, "answers/sendmmsg")
				}
			}
		})
	}
}
