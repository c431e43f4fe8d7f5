package outbound

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/forward"
	"github.com/coredns/coredns/plugin/pkg/proxy"
	"github.com/coredns/coredns/plugin/pkg/transport"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
)

// BenchmarkForwarding forwards the same query through outbound and through CoreDNS's forward to
// the same loopback resolver, in the same run, at the handler (ServeDNS) level:
//
//	go test ./plugin/outbound/ -run XXX -bench Forwarding -benchtime=2000x -count 3
func BenchmarkForwarding(b *testing.B) {
	r := startResolver(b, "127.0.0.60")
	r.quiet.Store(true)
	o := newHandler(b, "outbound example. {\nto "+r.addr+"\nprivate 127.0.0.0/8\nendpoint eu europe-west1 127.0.0.11\n}")
	f := forward.New()
	f.SetProxy(proxy.NewProxy("forward", r.addr, transport.DNS))
	if err := f.OnStartup(); err != nil {
		b.Fatal(err)
	}
	defer f.OnShutdown()

	for _, h := range []plugin.Handler{o, f} {
		b.Run(h.Name()+"/serial", func(b *testing.B) {
			m := new(dns.Msg)
			m.SetQuestion("bench.example.", dns.TypeA)
			w := &test.ResponseWriter{}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := h.ServeDNS(context.Background(), w, m); err != nil {
					b.Fatal(err)
				}
			}
		})
		serve := func(w dns.ResponseWriter, m *dns.Msg) error {
			_, err := h.ServeDNS(context.Background(), w, m)
			return err
		}
		b.Run(h.Name()+"/parallel", func(b *testing.B) { parallel(b, serve) })
		// As a server calls it: miekg/dns serves each UDP query on a goroutine of its own, whose
		// small stack the handler may have to grow (the benchmarks above reuse the benchmark's
		// goroutines, whose stacks have grown once).
		b.Run(h.Name()+"/goroutine", func(b *testing.B) {
			parallel(b, func(w dns.ResponseWriter, m *dns.Msg) error {
				done := make(chan error)
				go func() { done <- serve(w, m) }()
				return <-done
			})
		})
	}
}

// parallel runs serve from 8 goroutines per CPU.
func parallel(b *testing.B, serve func(dns.ResponseWriter, *dns.Msg) error) {
	b.Helper()
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		m := new(dns.Msg)
		m.SetQuestion("bench.example.", dns.TypeA)
		w := &test.ResponseWriter{}
		for pb.Next() {
			if err := serve(w, m); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// The failover figure: steady load through a real server (8 clients, 2,000 queries over about
// 2 s); the best endpoint's path goes silent a quarter of the way in. No query may fail; the
// test logs how many were slowed by the failover.
//
//	go test ./plugin/outbound/ -run FailoverUnderLoad -v
func TestFailoverUnderLoad(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	s := coretest.Start(t, twoEndpoints(r.addr, "timeout 5s"))
	mustQuery(t, s, "127.0.1.1", "warm.example.")

	const workers, perWorker = 8, 250
	const gap = 8 * time.Millisecond // 8 workers x 125 q/s = 1,000 q/s
	var failed, slow, done atomic.Int64
	var maxLat atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				t0 := time.Now()
				m, err := s.QueryFrom("127.0.1.1", fmt.Sprintf("w%d-%d.example.", w, i), dns.TypeA)
				lat := time.Since(t0)
				if err != nil || m.Rcode != dns.RcodeSuccess {
					failed.Add(1)
				}
				if lat > 100*time.Millisecond {
					slow.Add(1)
				}
				for {
					cur := maxLat.Load()
					if int64(lat) <= cur || maxLat.CompareAndSwap(cur, int64(lat)) {
						break
					}
				}
				if done.Add(1) == workers*perWorker/4 {
					r.drop(netip.MustParseAddr("127.0.0.11"))
				}
				if d := gap - lat; d > 0 {
					time.Sleep(d)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("failover under load: %d queries in %v, %d failed, %d slower than 100ms, slowest %v; eu %d, us %d",
		workers*perWorker, time.Since(start).Round(time.Millisecond), failed.Load(), slow.Load(),
		time.Duration(maxLat.Load()).Round(time.Millisecond), r.count("127.0.0.11"), r.count("127.0.0.12"))
	if failed.Load() != 0 {
		t.Errorf("O-6: %d queries failed after the best endpoint went silent", failed.Load())
	}
}

// TestDNSPerf runs dnsperf (when installed and OUTBOUND_DNSPERF=1) against two real servers in
// this process, one forwarding through outbound and one through forward, to the same loopback
// resolver, one after the other:
//
//	OUTBOUND_DNSPERF=1 go test ./plugin/outbound/ -run DNSPerf -v
func TestDNSPerf(t *testing.T) {
	if os.Getenv("OUTBOUND_DNSPERF") == "" {
		t.Skip("set OUTBOUND_DNSPERF=1 to run dnsperf")
	}
	bin, err := exec.LookPath("dnsperf")
	if err != nil {
		t.Skip("dnsperf not installed")
	}
	r := startResolver(t, "127.0.0.60")
	r.quiet.Store(true)
	qf := filepath.Join(t.TempDir(), "queries")
	var b strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&b, "q%d.example. A\n", i)
	}
	if err := os.WriteFile(qf, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []struct{ name, block string }{
		{"outbound", "outbound example. {\nto " + r.addr + "\nprivate 127.0.0.0/8\nendpoint eu europe-west1 127.0.0.11\n}"},
		{"forward", "forward example. " + r.addr},
		{"outbound", "outbound example. {\nto " + r.addr + "\nprivate 127.0.0.0/8\nendpoint eu europe-west1 127.0.0.11\n}"},
		{"forward", "forward example. " + r.addr},
	} {
		s := coretest.Start(t, "example.:0 {\nbind 127.0.0.1\n"+cfg.block+"\n}")
		host, port, _ := net.SplitHostPort(s.UDP)
		out, err := exec.Command(bin, "-s", host, "-p", port, "-d", qf, "-l", "5", "-c", "8", "-q", "64").CombinedOutput()
		if err != nil {
			t.Fatalf("dnsperf: %v\n%s", err, out)
		}
		for l := range strings.SplitSeq(string(out), "\n") {
			if strings.Contains(l, "Queries per second") || strings.Contains(l, "Queries lost") || strings.Contains(l, "Average Latency") {
				t.Logf("%s: %s", cfg.name, strings.TrimSpace(l))
			}
		}
		s.Stop()
	}
}
