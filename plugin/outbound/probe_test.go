package outbound

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// O-6 (issue 13, problem 5): probes ask a fixed question, by default the zone apex SOA, whatever
// clients asked first: a first client question that the resolver refuses does not make every
// probe fail.
func TestProbeQuestionFixed(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	r.refuseNames("refused.")
	o := newHandler(t, "outbound example. {\nto "+r.addr+"\nprivate 127.0.0.0/8\n}")
	m := new(dns.Msg)
	m.SetQuestion("refused.example.", dns.TypeA)
	if a := serve(t, o, m); a.Rcode != dns.RcodeRefused {
		t.Fatalf("client query: %s", dns.RcodeToString[a.Rcode])
	}
	o.explore(nil)
	if n := r.asked("example."); n != 1 {
		t.Errorf("O-6: the resolver got %d probes for the zone apex, want 1", n)
	}
	if n := r.asked("refused.example."); n != 1 {
		t.Errorf("O-6: the client's question was asked %d times: probes repeat it", n)
	}
	if _, _, _, consec, due := o.rk.pairs[0].stats(time.Now()); consec != 0 || due {
		t.Errorf("O-6: the probe failed (%d failures, due %v)", consec, due)
	}
}

// O-6: `probe NAME TYPE` sets the probe question.
func TestProbeProperty(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	o := newHandler(t, "outbound example. {\nto "+r.addr+"\nprivate 127.0.0.0/8\nprobe Health.Example.Net txt\n}")
	var seen dns.Question
	r.mu.Lock()
	r.onQuery = func(q *dns.Msg) { seen = q.Question[0] }
	r.mu.Unlock()
	o.explore(nil)
	r.mu.Lock()
	defer r.mu.Unlock()
	if seen.Name != "health.example.net." || seen.Qtype != dns.TypeTXT {
		t.Errorf("O-6: probe asked %v, want health.example.net. TXT", seen)
	}
}

// O-6 (issue 13, problem 5): every pair that needs a probe gets one in the round, however many
// they are: ten failed paths are ten probes, not the first eight in declaration order.
func TestEveryDuePairProbed(t *testing.T) {
	rs := make([]*resolver, 0, 10)
	targets := ""
	for i := range 10 {
		r := startResolver(t, fmt.Sprintf("127.0.0.%d", 71+i))
		rs = append(rs, r)
		targets += " " + r.addr
	}
	o := newHandler(t, "outbound example. {\nto"+targets+"\nprivate 127.0.0.0/8\n}")
	for _, p := range o.rk.pairs {
		p.record(o.now(), failure, 0)
	}
	o.explore(nil)
	for i, r := range rs {
		if n := r.asked("example."); n != 1 {
			t.Errorf("O-6: target %d got %d probes, want 1", i+1, n)
		}
	}
}

// O-6 (issue 13 problem 5, "every pair probed within its period however many are dead"): a round
// sends every due probe at once, with no bound. 400 dead pairs (one endpoint, 400 silent targets)
// get 400 probes, 400 goroutines and 400 sockets in the same instant, every second. O-4 allows 100
// endpoints per zone and `to` has no limit, so thousands are reachable.
func TestO6ProbesInFlightBounded(t *testing.T) {
	const n = 400
	var (
		mu    sync.Mutex
		times []time.Time
	)
	targets := make([]string, 0, n)
	for range n {
		pc, err := net.ListenPacket("udp", "127.0.0.50:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		targets = append(targets, pc.LocalAddr().String())
		go func() {
			buf := make([]byte, 512)
			for {
				if _, _, err := pc.ReadFrom(buf); err != nil {
					return
				}
				mu.Lock()
				times = append(times, time.Now())
				mu.Unlock()
			}
		}()
	}
	o := newHandler(t, "outbound example. {\nto "+strings.Join(targets, " ")+"\nprivate 127.0.0.0/8\n}")
	start := time.Now()
	o.explore(nil)
	mu.Lock()
	defer mu.Unlock()
	within := 0
	for _, at := range times {
		if at.Sub(start) < 200*time.Millisecond {
			within++
		}
	}
	const bound = 64
	if within > bound {
		t.Errorf("O-6: one probe round sent %d probes within 200 ms (%d pairs, all silent); no bound on probes in flight (want <= %d)", within, n, bound)
	}
}
