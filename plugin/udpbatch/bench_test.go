package udpbatch

import (
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"
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
// each with its own socket and window queries outstanding). It shows that batches form under load
// (answers/sendmmsg); its ns/op is no server throughput: the load generator runs in the same
// process, on the same processors, and the sender's yield lets it run too. Use dnsperf against a
// built server (bench/run) for throughput.
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

// BenchmarkSend is the cost per answer of the system calls alone, on loopback: miekg/dns's
// WriteToSessionUDP (one sendmsg per answer, what CoreDNS does without udpbatch) against the
// sender's sendmmsg with batches of 1, 8 and 64 answers. ns/op is per answer.
func BenchmarkSend(b *testing.B) {
	srv, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	// The control messages miekg/dns asks for on its listeners.
	if err := ipv4.NewPacketConn(srv).SetControlMessage(ipv4.FlagDst|ipv4.FlagInterface, true); err != nil {
		b.Fatal(err)
	}
	sink := newClient(b, "127.0.0.1")
	sink.send(srv.LocalAddr().(*net.UDPAddr).AddrPort(), query(b, 1, "www.example.org.", dns.TypeA, false))
	buf := make([]byte, 512)
	_, sess, err := dns.ReadFromSessionUDP(srv, buf)
	if err != nil {
		b.Fatal(err)
	}
	answer := make([]byte, 60)

	b.Run("sendmsg", func(b *testing.B) {
		for b.Loop() {
			if _, err := dns.WriteToSessionUDP(srv, answer, sess); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, n := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("sendmmsg-%d", n), func(b *testing.B) {
			s := newSocket(fmt.Sprintf("bench-send-%d", n), n)
			s.conn, s.pc = srv, ipv4.NewPacketConn(srv)
			ap := sess.RemoteAddr().(*net.UDPAddr).AddrPort()
			reply := replyOOB((&ipv4.ControlMessage{Dst: net.IPv4(127, 0, 0, 1), IfIndex: 1}).Marshal())
			batch := make([]entry, n)
			b.ResetTimer()
			for i := 0; i < b.N; i += n {
				es := batch[:min(n, b.N-i)]
				for j := range es {
					es[j] = entry{buf: answer, addr: ap, oob: reply}
				}
				s.send(es)
			}
		})
	}
}
