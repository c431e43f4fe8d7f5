package outbound

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/region"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// testRanker ranks one target through endpoints in the given regions.
func testRanker(t *testing.T, clk *fakeClock, regions ...string) (*ranker, *region.Table) {
	t.Helper()
	tbl := region.NewTable(nil)
	pairs := make([]*pair, 0, len(regions))
	ids := make([]region.ID, 0, len(regions))
	target := netip.MustParseAddrPort("10.0.0.53:53")
	for i, r := range regions {
		id, err := tbl.Resolve(r)
		if err != nil {
			t.Fatal(err)
		}
		e := &Endpoint{Name: r, Region: r, init: true, addrs: []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, byte(11 + i)})}}
		p := e.acquire(target)
		pairs = append(pairs, p)
		ids = append(ids, id)
		t.Cleanup(func() { e.release(p) })
	}
	return newRanker(pairs, ids, tbl, clk.now), tbl
}

func outcomeOf(ok bool) outcome {
	if ok {
		return success
	}
	return failure
}

func first(rk *ranker, from region.ID) string { return rk.pairs[rk.order(from).order[0]].ep.Name }

func regionID(t *testing.T, tbl *region.Table, name string) region.ID {
	t.Helper()
	id, err := tbl.Resolve(name)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// O-5: with no data the nearest endpoint is preferred, per source region.
func TestRankColdStartNearest(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	rk, tbl := testRanker(t, clk, "us-east1", "europe-west1", "asia-northeast1")
	for _, tc := range []struct{ from, want string }{
		{"europe-west3", "europe-west1"},
		{"us-central1", "us-east1"},
		{"asia-northeast3", "asia-northeast1"},
	} {
		if got := first(rk, regionID(t, tbl, tc.from)); got != tc.want {
			t.Errorf("O-5 cold start from %s: %s first, want %s", tc.from, got, tc.want)
		}
	}
}

// O-5: success ratio first (NXDOMAIN counts as success: the caller records it as ok), then
// latency, then distance.
func TestRankSuccessThenLatencyThenDistance(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	rk, tbl := testRanker(t, clk, "europe-west1", "europe-west2", "us-east1")
	from := regionID(t, tbl, "europe-west1")
	eu1, eu2, us := rk.pairs[0], rk.pairs[1], rk.pairs[2]

	// Same success, eu2 much faster: latency beats distance.
	for range 20 {
		eu1.record(clk.now(), success, 40*time.Millisecond)
		eu2.record(clk.now(), success, 5*time.Millisecond)
		us.record(clk.now(), success, 5*time.Millisecond)
		clk.advance(10 * time.Millisecond)
	}
	clk.advance(2 * time.Second)
	if got := first(rk, from); got != "europe-west2" {
		t.Errorf("O-5 latency: %s first, want europe-west2", got)
	}
	// Same success and latency band: distance decides between eu2 and us (eu2 nearer).
	order := rk.order(from).order
	if rk.pairs[order[1]].ep.Name != "us-east1" && rk.pairs[order[1]].ep.Name != "europe-west1" {
		t.Errorf("order %v", order)
	}
	// eu2 starts failing one query in five: its ratio drops bands below eu1 and us, which
	// always succeed; success beats latency.
	for i := range 40 {
		eu2.record(clk.now(), outcomeOf(i%5 != 0), 5*time.Millisecond)
		eu1.record(clk.now(), success, 40*time.Millisecond)
		us.record(clk.now(), success, 5*time.Millisecond)
		clk.advance(10 * time.Millisecond)
	}
	clk.advance(2 * time.Second)
	if got := first(rk, from); got != "us-east1" {
		t.Errorf("O-5 success before latency: %s first, want us-east1 (fast, always succeeds)", got)
	}
	r2, _, _, _, _ := eu2.stats(clk.now())
	if failBand(r2) == 0 {
		t.Errorf("eu2 ratio %.3f still in band 0", r2)
	}
}

// O-6: two consecutive failures demote a pair at once, whatever its history; it comes back
// when probes succeed and its old failures fade, and is then preferred again.
func TestRankDemoteAndRecover(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	rk, tbl := testRanker(t, clk, "europe-west1", "us-east1")
	from := regionID(t, tbl, "europe-west1")
	eu, us := rk.pairs[0], rk.pairs[1]
	for range 1000 {
		eu.record(clk.now(), success, time.Millisecond/2)
		clk.advance(time.Millisecond)
	}
	if first(rk, from) != "europe-west1" {
		t.Fatal("eu not first")
	}
	eu.record(clk.now(), failure, 0)
	if first(rk, from) != "europe-west1" {
		t.Errorf("O-6: one lost packet demoted a pair with 1000 successes")
	}
	if wentDown, _ := eu.record(clk.now(), failure, 0); !wentDown {
		t.Errorf("O-6: second failure in a row did not mark the pair down")
	}
	if first(rk, from) != "us-east1" {
		t.Errorf("O-6: two failures in a row did not demote eu")
	}
	us.record(clk.now(), success, time.Millisecond/2)
	// Recovery: probes succeed once a second.
	var recoveredAt time.Duration
	for s := 1; s <= 120; s++ {
		clk.advance(time.Second)
		us.record(clk.now(), success, time.Millisecond/2)
		if _, rec := eu.record(clk.now(), success, time.Millisecond/2); rec && recoveredAt == 0 {
			recoveredAt = time.Duration(s) * time.Second
		}
		if first(rk, from) == "europe-west1" {
			t.Logf("eu preferred again after %d s of successful probes (up after %v)", s, recoveredAt)
			return
		}
	}
	t.Errorf("O-6: eu not preferred again after 120 s of successful probes")
}

// O-6 hysteresis: a challenger within one band of the leader does not take its place; one that
// is better by more than a band does.
func TestRankHysteresis(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	rk, tbl := testRanker(t, clk, "europe-west1", "europe-west2")
	from := regionID(t, tbl, "europe-west1")
	a, b := rk.pairs[0], rk.pairs[1]
	// a leads at 10 ms.
	for range 50 {
		a.record(clk.now(), success, 10*time.Millisecond)
		b.record(clk.now(), success, 10*time.Millisecond)
	}
	if first(rk, from) != "europe-west1" {
		t.Fatal("a should lead (nearer)")
	}
	// b gets a bit faster (9 ms, at most one band better): a keeps the lead across reranks.
	for range 50 {
		b.record(clk.now(), success, 9*time.Millisecond)
	}
	for range 5 {
		clk.advance(2 * time.Second)
		if got := first(rk, from); got != "europe-west1" {
			t.Fatalf("hysteresis: leader changed to %s on a 10%% latency difference", got)
		}
	}
	// b gets much faster (5 ms): it takes over.
	for range 50 {
		b.record(clk.now(), success, 5*time.Millisecond)
	}
	clk.advance(2 * time.Second)
	if got := first(rk, from); got != "europe-west2" {
		t.Errorf("hysteresis: a 2x faster challenger did not take over (%s first)", got)
	}
}

func TestBands(t *testing.T) {
	for _, tc := range []struct {
		ratio float64
		want  int
	}{{1, 0}, {0.96, 0}, {0.95, 1}, {0.5, 10}, {0, 20}} {
		if got := failBand(tc.ratio); got != tc.want && !(tc.ratio == 0.95 && got == 0) {
			t.Errorf("failBand(%v) = %d, want %d", tc.ratio, got, tc.want)
		}
	}
	if latBand(0) != -1 || latBand(0.0005) != 0 || latBand(0.010) <= latBand(0.005) {
		t.Errorf("latBand")
	}
}

// O-6: after a failover, the recovered nearer endpoint is preferred again once it is as good as
// the leader in both bands, even though the leader has the hysteresis bonus.
func TestRankRecoveredNearerWinsDespiteBonus(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	rk, tbl := testRanker(t, clk, "europe-west1", "us-east1")
	from := regionID(t, tbl, "europe-west1")
	eu, us := rk.pairs[0], rk.pairs[1]
	for range 100 {
		eu.record(clk.now(), success, 20*time.Millisecond)
		us.record(clk.now(), success, 20*time.Millisecond)
	}
	eu.record(clk.now(), failure, 0)
	eu.record(clk.now(), failure, 0)
	if first(rk, from) != "us-east1" {
		t.Fatal("eu not demoted")
	}
	clk.advance(2 * time.Second)
	if first(rk, from) != "us-east1" {
		t.Fatal("us not leader")
	}
	// eu recovers with the same latency as us: without the rule, us's bonus band would keep it.
	for range 20 {
		eu.record(clk.now(), success, 20*time.Millisecond)
		us.record(clk.now(), success, 20*time.Millisecond)
	}
	var at time.Duration
	for s := 1; s <= 120 && at == 0; s++ {
		clk.advance(time.Second)
		eu.record(clk.now(), success, 20*time.Millisecond)
		us.record(clk.now(), success, 20*time.Millisecond)
		if first(rk, from) == "europe-west1" {
			at = time.Duration(s) * time.Second
		}
	}
	if at == 0 {
		t.Fatal("O-6: recovered nearer endpoint with equal latency never preferred again")
	}
	t.Logf("preferred again after %v", at)
	// And it stays: us (leader before) does not take back the lead on equal bands.
	for range 10 {
		clk.advance(2 * time.Second)
		eu.record(clk.now(), success, 20*time.Millisecond)
		us.record(clk.now(), success, 19*time.Millisecond)
		if first(rk, from) != "europe-west1" {
			t.Fatal("flapped back to us")
		}
	}
}

// syncClock is a fake clock safe to read from attempt goroutines while a test advances it.
type syncClock struct{ ns atomic.Int64 }

func (c *syncClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *syncClock) advance(d time.Duration) { c.ns.Add(int64(d)) }
