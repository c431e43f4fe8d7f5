package outbound

import (
	"fmt"
	"strings"
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
	exploreRound(o)
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
	exploreRound(o)
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
	exploreRound(o)
	for i, r := range rs {
		if n := r.asked("example."); n != 1 {
			t.Errorf("O-6: target %d got %d probes, want 1", i+1, n)
		}
	}
}

// exploreRound starts the due probes, waits for them and publishes the gauges: one prober period
// in a test.
func exploreRound(o *Outbound) {
	o.explore()
	o.probes.wg.Wait()
	o.publish()
}

// deadHandler is a block towards targets whose pairs all failed once, on a fake clock.
func deadHandler(t *testing.T, targets []string, clk *syncClock) *Outbound {
	t.Helper()
	o := newHandler(t, "outbound example. {\nto "+strings.Join(targets, " ")+"\nprivate 127.0.0.0/8\n}")
	o.now = clk.now
	for _, p := range o.rk.pairs {
		p.record(o.now(), failure, 0)
	}
	return o
}

// O-6 (issue 13 problem 5, "every pair probed within its period however many are dead"), with
// more silent pairs than probes may be in flight: a round used to send every due probe at once
// (400 dead pairs: 400 goroutines and sockets in the same instant, every second). At most probeCap
// probes are in flight, whatever the ticks in between; each pair is probed in turn, the most
// overdue first, so ceil(n / probeCap) batches probe every pair. The prober's ticks are driven
// by hand on a fake clock; the probes time out on the wall clock.
func TestO6ProbesInFlightBounded(t *testing.T) {
	const n = 150
	clk := &syncClock{}
	clk.ns.Store(time.Unix(1e9, 0).UnixNano())
	targets, got := rawResolvers(t, n, clk.now, func([]byte) []byte { return nil })
	o := deadHandler(t, targets, clk)
	for batch := range (n + probeCap - 1) / probeCap {
		for range 5 { // ticks while the batch's silent probes are in flight
			o.explore()
			clk.advance(exploreTick)
		}
		o.probes.wg.Wait()
		probed, total := 0, 0
		for _, ts := range got() {
			if len(ts) > 0 {
				probed++
			}
			total += len(ts)
		}
		// Once every pair was probed, the first ones are due again and fill the batch.
		if want := min(n, (batch+1)*probeCap); probed != want || total != (batch+1)*probeCap {
			t.Fatalf("O-6: after batch %d, %d probes reached %d of %d silent pairs, want %d reaching %d (at most %d in flight)", batch+1, total, probed, n, (batch+1)*probeCap, want, probeCap)
		}
	}
}

// O-6 ("every pair probed within its period however many are dead"): 400 dead pairs whose
// resolvers refuse the probe question at once (a failure) are each probed in every period, never
// more than probeCap at a time. A pair's period is exploreEvery, give or take probeJitter, plus up
// to a tick until the prober looks; the bound adds two ticks of queueing when more pairs are due at
// a tick than may start. The ticks are driven by hand on a fake clock, each once the probes it
// started have ended.
func TestO6EveryDeadPairProbedEveryPeriod(t *testing.T) {
	const n = 400
	clk := &syncClock{}
	clk.ns.Store(time.Unix(1e9, 0).UnixNano())
	targets, got := rawResolvers(t, n, clk.now, func(q []byte) []byte {
		m := new(dns.Msg)
		if m.Unpack(q) != nil {
			return nil
		}
		m.SetRcode(m, dns.RcodeRefused)
		b, _ := m.Pack()
		return b
	})
	o := deadHandler(t, targets, clk)
	start := clk.now()
	const run = 5 * exploreEvery
	for clk.now().Sub(start) < run {
		o.explore()
		o.probes.wg.Wait()
		clk.advance(exploreTick)
	}
	end := clk.now()
	bound := time.Duration(float64(exploreEvery)*(1+probeJitter)) + 3*exploreTick
	first := time.Duration(n/probeCap) * exploreTick // the first pass over every pair
	var worst time.Duration
	for i, ts := range got() {
		prev := start.Add(first - bound) // the first probe is due within first
		for _, at := range append(ts, end) {
			gap := at.Sub(prev)
			if gap > bound {
				t.Fatalf("O-6: pair %d of %d dead ones went %v without a probe (probes at %v), want at most %v", i, n, gap, offsets(ts, start), bound)
			}
			if prev != start.Add(first-bound) {
				worst = max(worst, gap)
			}
			prev = at
		}
	}
	t.Logf("the longest a dead pair went without a probe: %v", worst)
}

func offsets(ts []time.Time, start time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, at := range ts {
		out[i] = at.Sub(start)
	}
	return out
}
