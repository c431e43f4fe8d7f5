package healthcheck

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// script is a fake probe: each target answers what the test says.
type script struct {
	mu       sync.Mutex
	outcome  map[netip.AddrPort]outcome
	attempts map[netip.AddrPort]int
}

func newScript() *script {
	return &script{outcome: map[netip.AddrPort]outcome{}, attempts: map[netip.AddrPort]int{}}
}

func (s *script) set(t netip.AddrPort, o outcome) {
	s.mu.Lock()
	s.outcome[t] = o
	s.mu.Unlock()
}

func (s *script) count(t netip.AddrPort) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts[t]
}

func (s *script) probe(_ context.Context, _ *checkRun, _ int, t netip.AddrPort, _ string) attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts[t]++
	o, ok := s.outcome[t]
	if !ok {
		o = success
	}
	return attempt{outcome: o, reason: "scripted " + o.String()}
}

func testRegistry(t *testing.T) (*Registry, *fakeClock, *health.Board) {
	t.Helper()
	clk := newFakeClock()
	b := health.NewBoard(clk.Now)
	r := NewRegistry(b, clk)
	r.jitter = func(time.Duration) time.Duration { return 0 }
	r.early = 0
	r.start()
	t.Cleanup(r.stop)
	return r, clk, b
}

// waitFor polls cond with a deadline; it does not depend on the machine's speed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func waitRounds(t *testing.T, r *Registry, n uint64) {
	t.Helper()
	waitFor(t, "probe rounds", func() bool { return r.rounds.Load() >= n })
}

var tgt = netip.MustParseAddrPort("127.0.0.1:80")

// HC-1 and HC-2 through the scheduler: one round per interval, thresholds on the aggregated
// verdict, every attached board target follows, with the time from the injected clock.
func TestSchedulerThresholds(t *testing.T) {
	r, clk, b := testRegistry(t)
	s := newScript()
	r.probe = s.probe
	c := grid(3, 3)
	c.Interval = 10 * time.Second
	c.HealthyThreshold, c.UnhealthyThreshold = 2, 3
	run := newCheckRun(c)

	bt := b.Acquire(health.Key{Check: "web", Addr: tgt.Addr()})
	p := r.acquire(run, tgt)
	r.attach(p, bt)
	waitRounds(t, r, 1) // jitter 0: the first round is due at once
	if bt.State() != health.Healthy {
		t.Fatalf("after the first round: %v, want healthy", bt.State())
	}
	if n := s.count(tgt); n != 9 {
		t.Fatalf("3 regions x 3 probers: %d attempts, want 9", n)
	}
	// Nothing more before the interval has passed.
	clk.Advance(9 * time.Second)
	time.Sleep(5 * time.Millisecond)
	if n := s.count(tgt); n != 9 {
		t.Fatalf("before the interval: %d attempts, want 9", n)
	}
	s.set(tgt, failure)
	for i := uint64(2); i <= 3; i++ {
		clk.Advance(time.Second)
		waitRounds(t, r, i)
		clk.Advance(9 * time.Second)
		if bt.State() != health.Healthy {
			t.Fatalf("after %d failures: %v, want healthy (threshold 3)", i-1, bt.State())
		}
	}
	clk.Advance(time.Second)
	waitRounds(t, r, 4)
	st := bt.Status()
	if st.State != health.Unhealthy || !st.Since.Equal(clk.Now()) {
		t.Fatalf("after 3 failures: %+v, want unhealthy since %v", st, clk.Now())
	}
	if want := "3 consecutive failures: 0/3 regions healthy"; len(st.Reason) < len(want) || st.Reason[:len(want)] != want {
		t.Fatalf("reason %q, want prefix %q", st.Reason, want)
	}
	// A second board key for the same probe gets the verdict at once.
	bt2 := b.Acquire(health.Key{Check: "web", Addr: tgt.Addr(), Port: 80})
	r.attach(p, bt2)
	if bt2.State() != health.Unhealthy {
		t.Fatalf("attached late: %v, want unhealthy", bt2.State())
	}
	r.detach(p, bt2)
	r.detach(p, bt)
	r.release(p, run)
}

// HC-5: first probes are spread over the interval. 1000 targets with a 30 s interval: each
// tenth of the interval gets 100 on average (sd 9.5); the bounds 40..160 are more than 6 sd
// away, which a uniform spread misses less than once in a million runs.
func TestJitterHC5(t *testing.T) {
	r, clk, _ := testRegistry(t)
	r.jitter = uniformJitter
	s := newScript()
	r.probe = s.probe
	c := grid(1, 1)
	run := newCheckRun(c)
	start := clk.Now()
	probes := make([]*probe, 0, 1000)
	for i := range 1000 {
		a := netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)})
		probes = append(probes, r.acquire(run, netip.AddrPortFrom(a, 80)))
	}
	var buckets [10]int
	r.mu.Lock()
	for _, p := range probes {
		off := p.due.Sub(start)
		if off < 0 || off >= c.Interval {
			t.Fatalf("first probe at %v, want within [0, %v)", off, c.Interval)
		}
		buckets[off*10/c.Interval]++
	}
	r.mu.Unlock()
	for i, n := range buckets {
		if n < 40 || n > 160 {
			t.Errorf("bucket %d has %d first probes, want 40..160 (uniform spread)", i, n)
		}
	}
	// Advancing a tenth of the interval runs about a tenth of them, not all.
	clk.Advance(c.Interval / 10)
	waitRounds(t, r, uint64(buckets[0]))
	time.Sleep(5 * time.Millisecond)
	if got := r.rounds.Load(); got != uint64(buckets[0]) {
		t.Errorf("%d rounds after a tenth of the interval, want %d", got, buckets[0])
	}
	for _, p := range probes {
		r.release(p, run)
	}
}

// HC-5: concurrency is bounded. 50 targets all due at once, 5 slots: never more than 5 probes
// run together, and every target is still probed.
func TestBoundedConcurrencyHC5(t *testing.T) {
	r, _, _ := testRegistry(t)
	r.limit = 5
	var cur, peak, total atomic.Int32
	gate := make(chan struct{})
	r.probe = func(context.Context, *checkRun, int, netip.AddrPort, string) attempt {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-gate
		cur.Add(-1)
		total.Add(1)
		return attempt{outcome: success}
	}
	run := newCheckRun(grid(1, 1))
	probes := make([]*probe, 0, 50)
	for i := range 50 {
		probes = append(probes, r.acquire(run, netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 2, 0, byte(i)}), 80)))
	}
	waitFor(t, "5 probes in flight", func() bool { return cur.Load() == 5 })
	time.Sleep(10 * time.Millisecond)
	if p := peak.Load(); p != 5 {
		t.Fatalf("peak concurrency %d, want 5", p)
	}
	close(gate)
	waitRounds(t, r, 50)
	if total.Load() != 50 || peak.Load() != 5 {
		t.Fatalf("total %d peak %d, want 50 and 5", total.Load(), peak.Load())
	}
	for _, p := range probes {
		r.release(p, run)
	}
}

// H-4: a reload acquires the same (check, target) before the old instance releases it: the
// state, the threshold counters and the schedule survive. A changed probe definition restarts
// the counters, not the state.
func TestReloadKeepsCountersH4(t *testing.T) {
	r, clk, b := testRegistry(t)
	s := newScript()
	r.probe = s.probe
	c := grid(1, 1)
	c.Interval = 10 * time.Second
	bt := b.Acquire(health.Key{Check: "web", Addr: tgt.Addr()})
	run1 := newCheckRun(c)
	p := r.acquire(run1, tgt)
	r.attach(p, bt)
	waitRounds(t, r, 1)
	s.set(tgt, failure)
	clk.Advance(10 * time.Second)
	waitRounds(t, r, 2) // one failure of two
	if bt.State() != health.Healthy {
		t.Fatalf("%v, want healthy", bt.State())
	}
	due := p.due

	// Reload: same definition, new interval.
	c2 := *c
	c2.Interval = 20 * time.Second
	run2 := newCheckRun(&c2)
	p2 := r.acquire(run2, tgt)
	if p2 != p {
		t.Fatal("a reload created a second probe for the same (check, target) (H-3)")
	}
	r.attach(p2, bt)
	r.detach(p, bt)
	r.release(p, run1)
	if probes(r) != 1 || p.due != due {
		t.Fatalf("after reload: %d probes, due %v (was %v)", probes(r), p.due, due)
	}
	clk.Advance(10 * time.Second)
	waitRounds(t, r, 3) // the second failure: the counter survived the reload
	if bt.State() != health.Unhealthy {
		t.Fatalf("%v, want unhealthy: the reload lost the failure counter", bt.State())
	}

	// Reload with a different probe (another port): counters restart, state stays.
	s.set(tgt, success)
	clk.Advance(20 * time.Second)
	waitRounds(t, r, 4) // one success of two
	c3 := c2
	c3.Path, c3.Protocol = "/other", HTTP
	run3 := newCheckRun(&c3)
	p3 := r.acquire(run3, tgt)
	r.release(p2, run2)
	clk.Advance(20 * time.Second)
	waitRounds(t, r, 5)
	if bt.State() != health.Unhealthy {
		t.Fatalf("%v, want unhealthy: a changed probe must restart the counters", bt.State())
	}
	clk.Advance(20 * time.Second)
	waitRounds(t, r, 6)
	if bt.State() != health.Healthy {
		t.Fatalf("%v, want healthy after 2 successes of the new probe", bt.State())
	}
	r.detach(p3, bt)
	r.release(p3, run3)
}

// H-4: the last release stops the probe at once, cancelling a probe in flight, and no round
// runs after it.
func TestReleaseStopsAtOnceH4(t *testing.T) {
	r, clk, _ := testRegistry(t)
	started := make(chan struct{})
	var calls atomic.Int32
	r.probe = func(ctx context.Context, _ *checkRun, _ int, _ netip.AddrPort, _ string) attempt {
		calls.Add(1)
		close(started)
		<-ctx.Done() // a probe that would hang until its timeout
		return attempt{outcome: failure, reason: "cancelled"}
	}
	run := newCheckRun(grid(1, 1))
	p := r.acquire(run, tgt)
	<-started
	r.release(p, run)
	waitRounds(t, r, 1) // the cancelled round finishes at once
	if probes(r) != 0 {
		t.Fatalf("%d probes after the last release", probes(r))
	}
	clk.Advance(time.Hour)
	time.Sleep(5 * time.Millisecond)
	if calls.Load() != 1 {
		t.Fatalf("%d probe calls, want 1: a released probe ran again", calls.Load())
	}
}

// A reload that fails after our startup releases the new definition first: the previous one
// probes again.
func TestFailedReloadRevertsDefinition(t *testing.T) {
	r, _, _ := testRegistry(t)
	r.probe = newScript().probe
	c1 := grid(1, 1)
	c2 := *c1
	c2.Port = 8080
	run1, run2 := newCheckRun(c1), newCheckRun(&c2)
	p := r.acquire(run1, tgt)
	r.acquire(run2, tgt)
	r.mu.Lock()
	cur := p.run
	r.mu.Unlock()
	if cur != run2 {
		t.Fatal("the latest definition does not probe")
	}
	r.release(p, run2)
	r.mu.Lock()
	cur = p.run
	r.mu.Unlock()
	if cur != run1 || probes(r) != 1 {
		t.Fatalf("after the new instance released: run %p, want the old %p", cur, run1)
	}
	r.release(p, run1)
}
