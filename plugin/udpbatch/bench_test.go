package udpbatch

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/udpanswer"

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
			reply := udpanswer.ReplyOOB((&ipv4.ControlMessage{Dst: net.IPv4(127, 0, 0, 1), IfIndex: 1}).Marshal())
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

// BenchmarkLatency is the round trip of queries at a fixed rate of 2,000 a second, with and
// without udpbatch (the low-load bound: batching may not add latency there), reported as
// the median and the 99th percentile in microseconds. Two clients each send one query per
// millisecond (the runtime's timers are not finer), half a millisecond apart, and wait for its
// answer: the server sees a query every 0.5 ms, alone. ns/op is the pacing.
//
//	go test -run '^$' -bench 'BenchmarkLatency$' -benchtime 4000x ./plugin/udpbatch/
func BenchmarkLatency(b *testing.B) {
	for _, bc := range benchConfigs {
		b.Run(bc.name, func(b *testing.B) { latency(b, bc.directive, 2) })
	}
}

// BenchmarkLatencyContended is BenchmarkLatency on one processor with a goroutine that keeps it
// busy (a GC worker, a zone reload; a pod limited to one CPU): a sender that yielded would wait
// behind it for a time slice (10 ms) more. One client, one query at a time: it runs in the same
// process and waits for the processor too, so both configurations pay the same for that; compare
// the two lines.
//
//	go test -run '^$' -bench 'BenchmarkLatencyContended' -benchtime 200x ./plugin/udpbatch/
func BenchmarkLatencyContended(b *testing.B) {
	for _, bc := range benchConfigs {
		b.Run(bc.name, func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			var stop atomic.Bool
			done := make(chan struct{})
			go func() {
				defer close(done)
				for x := 0; !stop.Load(); x++ {
				}
			}()
			defer func() {
				stop.Store(true)
				<-done
			}()
			latency(b, bc.directive, 1)
		})
	}
}

// latency measures round trips from n clients, each sending a query per millisecond, 1/n ms
// apart.
func latency(b *testing.B, directive string, n int) {
	b.Helper()
	to, _ := benchServer(b, directive)
	q := query(b, 1, "www.example.org.", dns.TypeA, false)
	clients := make([]*client, n)
	for i := range clients {
		clients[i] = newClient(b, "127.0.0.1")
		clients[i].exchange(to, q)
	}
	rtts := make([][]time.Duration, len(clients))
	var wg sync.WaitGroup
	b.ResetTimer()
	for i, c := range clients {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * time.Millisecond / time.Duration(n))
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for range b.N / len(clients) {
				<-tick.C
				start := time.Now()
				c.send(to, q)
				if _, _, err := c.read(); err != nil {
					b.Error(err)
					return
				}
				rtts[i] = append(rtts[i], time.Since(start))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	all := slices.Concat(rtts...)
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	us := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))]) / float64(time.Microsecond) }
	b.ReportMetric(us(0.5), "p50-µs")
	b.ReportMetric(us(0.99), "p99-µs")
}
