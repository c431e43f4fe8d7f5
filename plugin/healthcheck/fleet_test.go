package healthcheck

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/etcdtest"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// regionScript is a fake probe whose outcome depends on the target and on the prober's region,
// like a target reachable from some regions only; it counts attempts by target and region.
type regionScript struct {
	mu       sync.Mutex
	healthy  map[netip.AddrPort]map[string]bool
	attempts map[netip.AddrPort]map[string]int
}

func newRegionScript() *regionScript {
	return &regionScript{healthy: map[netip.AddrPort]map[string]bool{}, attempts: map[netip.AddrPort]map[string]int{}}
}

func (s *regionScript) set(t netip.AddrPort, regions ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.healthy[t] = map[string]bool{}
	for _, r := range regions {
		s.healthy[t][r] = true
	}
}

func (s *regionScript) probe(_ context.Context, run *checkRun, slot int, t netip.AddrPort, _ string) attempt {
	region := run.probers[slot].region
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.attempts[t] == nil {
		s.attempts[t] = map[string]int{}
	}
	s.attempts[t][region]++
	if s.healthy[t][region] {
		return attempt{outcome: success}
	}
	return attempt{outcome: failure, reason: "refused from " + region}
}

// take returns the attempts counted so far and starts counting again.
func (s *regionScript) take() map[netip.AddrPort]map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.attempts
	s.attempts = map[netip.AddrPort]map[string]int{}
	return a
}

// replica is one fleet member in this process: its own registry and board, the shared etcd.
type replica struct {
	name   string
	reg    *Registry
	board  *health.Board
	f      *fleet
	view   *fleetView
	run    *checkRun
	probes []*probe
	bts    []*health.Target
}

func fleetCheck(interval time.Duration, regions ...string) *Check {
	c := newCheck("web")
	c.Interval, c.Timeout = interval, interval/2
	c.HealthyThreshold, c.UnhealthyThreshold = 1, 1
	for _, r := range regions {
		c.Regions = append(c.Regions, Region{Name: r})
	}
	return c
}

func testFleetConfig(endpoint, prefix, name string, perRegion int) *fleetConfig {
	return &fleetConfig{Endpoints: []string{endpoint}, Prefix: prefix, Replica: name, ReplicasPerRegion: perRegion, Timeout: 3 * time.Second}
}

// startReplica starts a member probing targets with check c through script.
func startReplica(t *testing.T, cfg *fleetConfig, c *Check, script *regionScript, targets ...netip.AddrPort) *replica {
	t.Helper()
	return startProbeReplica(t, cfg, c, script.probe, targets...)
}

// startProbeReplica starts a member probing targets with check c through probe.
func startProbeReplica(t *testing.T, cfg *fleetConfig, c *Check, probe func(context.Context, *checkRun, int, netip.AddrPort, string) attempt, targets ...netip.AddrPort) *replica {
	t.Helper()
	return startReplicaJitter(t, cfg, c, probe, uniformJitter, targets...)
}

// noJitter has every first round at once.
func noJitter(time.Duration) time.Duration { return 0 }

// startReplicaJitter is startProbeReplica with the first rounds spread by jitter.
func startReplicaJitter(t *testing.T, cfg *fleetConfig, c *Check, probe func(context.Context, *checkRun, int, netip.AddrPort, string) attempt, jitter func(time.Duration) time.Duration, targets ...netip.AddrPort) *replica {
	t.Helper()
	b := health.NewBoard(time.Now)
	r := NewRegistry(b, realClock{})
	r.probe, r.jitter = probe, jitter
	r.start()
	rp := &replica{name: cfg.Replica, reg: r, board: b, view: newFleetView([]*Check{c})}
	rp.f = joinFleet(cfg, rp.view)
	rp.run = newCheckRun(c)
	rp.run.fleet = &fleetRun{f: rp.f, perRegion: cfg.ReplicasPerRegion}
	for _, tg := range targets {
		bt := b.Acquire(health.Key{Check: c.Name, Addr: tg.Addr(), Port: tg.Port()})
		p := r.acquire(rp.run, tg)
		r.attach(p, bt)
		rp.probes = append(rp.probes, p)
		rp.bts = append(rp.bts, bt)
	}
	t.Cleanup(rp.stop)
	return rp
}

func (rp *replica) stop() {
	if rp.reg == nil {
		return
	}
	for i, p := range rp.probes {
		rp.reg.detach(p, rp.bts[i])
		rp.reg.release(p, rp.run)
		rp.board.Release(rp.bts[i])
	}
	rp.f.leave(rp.view)
	rp.reg.stop()
	rp.reg = nil
}

func (rp *replica) status(i int) health.Status { return rp.bts[i].Status() }

// F-2, F-3, HC-2 over the fleet: four replicas (two in us-east1, one in europe-west1, one in
// asia-east1) with replicas_per_region 1. A target healthy from 2 of 3 regions is healthy on
// every replica, one healthy from 1 of 3 unhealthy on every replica, although the replica of
// that one region alone would say healthy; and each (target, region) is probed by one replica,
// not by every replica of the region.
func TestFleetSharedVerdictF3(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	prefix := "/test/" + t.Name()
	t2of3 := netip.MustParseAddrPort("127.0.80.1:80")
	t1of3 := netip.MustParseAddrPort("127.0.80.2:80")
	script := newRegionScript()
	script.set(t2of3, "us-east1", "europe-west1")
	script.set(t1of3, "europe-west1")
	layout := []struct{ name, region string }{{"a", "us-east1"}, {"b", "us-east1"}, {"c", "europe-west1"}, {"d", "asia-east1"}}
	rs := make([]*replica, 0, len(layout))
	for _, l := range layout {
		rs = append(rs, startReplica(t, testFleetConfig(etcd.Endpoint, prefix, l.name, 1), fleetCheck(time.Second, l.region), script, t2of3, t1of3))
	}
	// Alone, c would serve the 1-of-3 target and d would not serve the 2-of-3 one.
	waitFor30(t, "every replica decides from the fleet", func() bool {
		for _, rp := range rs {
			s0, s1 := rp.status(0), rp.status(1)
			if s0.State != health.Healthy || s0.Reason != "fleet: 2/3 regions healthy" ||
				s1.State != health.Unhealthy || s1.Reason != "fleet: 1/3 regions healthy (asia-east1: refused from asia-east1)" {
				return false
			}
		}
		return true
	})
	// F-3: they agree at every moment, not only eventually: nothing changes, so every replica
	// reads the same keys. F-2: over the same three intervals each (target, region) is probed by
	// one replica of the region.
	script.take()
	agreeThroughout(t, 3*time.Second, rs)
	got := script.take()
	for _, tg := range []netip.AddrPort{t2of3, t1of3} {
		for _, region := range []string{"us-east1", "europe-west1", "asia-east1"} {
			// 3 s at a 1 s interval: 2 to 4 rounds, one probe each; every replica of the region
			// probing would give twice that in us-east1.
			if n := got[tg][region]; n < 2 || n > 4 {
				t.Errorf("target %s region %s: %d probes in 3 intervals, want 2..4 (one replica probing)", tg, region, n)
			}
		}
	}
}

// agreeThroughout checks, every 20 ms for d, that every replica has the same verdict and the
// same reason for each of its targets at the same moment (F-3): replicas that read the same
// keys in etcd decide the same, whatever their history.
func agreeThroughout(t *testing.T, d time.Duration, rs []*replica) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for i := range rs[0].bts {
			want := rs[0].status(i)
			for _, rp := range rs[1:] {
				if got := rp.status(i); got.State != want.State || got.Reason != want.Reason {
					t.Fatalf("target %d: replica %s %v (%s), replica %s %v (%s) at the same moment", i, rs[0].name, want.State, want.Reason, rp.name, got.State, got.Reason)
				}
			}
		}
	}
}

func waitFor30(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// F-4: the fleet decides a check only while its view is fresh: etcd's watch answered within the
// renewal period plus the timeout and within 3 intervals (a shared verdict is never older), no
// due result has failed to be written for as long, etcd reports no alarm; and one interval after
// a join or an outage, once every member had a round to publish. Otherwise the replica decides
// alone.
func TestFleetModeF4(t *testing.T) {
	now := time.Unix(1000, 0)
	f := &fleet{cfg: &fleetConfig{Timeout: 10 * time.Second}, now: func() time.Time { return now }}
	iv := time.Second
	if j, s := f.mode(iv); j || s {
		t.Fatalf("not joined: joined %v shared %v", j, s)
	}
	f.joined, f.since, f.heard = true, now.Add(-500*time.Millisecond), now
	if j, s := f.mode(iv); !j || s {
		t.Fatalf("joined half an interval ago: joined %v shared %v, want joined and deciding alone", j, s)
	}
	f.since = now.Add(-iv)
	if _, s := f.mode(iv); !s {
		t.Fatal("joined an interval ago and heard now: want shared")
	}
	f.heard = now.Add(-3*iv - time.Millisecond)
	if _, s := f.mode(iv); s {
		t.Fatal("the watch last answered more than 3 intervals ago: want the replica alone")
	}
	f.since = now.Add(-time.Hour)
	if _, s := f.mode(10 * iv); !s {
		t.Fatal("3.001 s is within 3 intervals of 10 s and within the timeout: want shared")
	}
	f.cfg.Timeout = time.Second
	if _, s := f.mode(10 * iv); s || !strings.HasPrefix(f.stale(now), "etcd unreachable") {
		t.Fatalf("the watch last answered beyond the beat and the timeout: want the replica alone (%q)", f.stale(now))
	}
	f.heard = now
	f.unwritten = now.Add(-fleetBeat - time.Second)
	if _, s := f.mode(iv); !s {
		t.Fatal("writes failing for the beat plus the timeout, not longer: want shared")
	}
	f.unwritten = now.Add(-fleetBeat - time.Second - time.Millisecond)
	if _, s := f.mode(iv); s || !strings.HasPrefix(f.stale(now), "etcd refuses writes") {
		t.Fatalf("due results unwritten past the timeout: want the replica alone (%q)", f.stale(now))
	}
	f.unwritten, f.alarm = time.Time{}, "NOSPACE"
	if _, s := f.mode(iv); s || !strings.Contains(f.stale(now), "alarm NOSPACE") {
		t.Fatalf("etcd reports an alarm: want the replica alone (%q)", f.stale(now))
	}
	f.alarm, f.dup = "", true
	if _, s := f.mode(iv); s {
		t.Fatal("a duplicate replica name: want the replica alone")
	}
	f.dup = false
	f.superseded.Store(true)
	if _, s := f.mode(iv); s {
		t.Fatal("a newer membership of this process has the name: want the replica alone")
	}
}

// F-4: an answer of the watch alone does not make the view current. Its member answers a
// progress request at once with its own revision, also when it fell behind the cluster: a
// keepalive of the stream, not a sign that the mirror has what etcd holds. The view is current
// as of a linearizable read once the watch has delivered up to the revision that read returned.
func TestFleetFreshNeedsCurrentRevisionF4(t *testing.T) {
	now := time.Unix(1000, 0)
	f := &fleet{cfg: &fleetConfig{Timeout: time.Second}, now: func() time.Time { return now }}
	iv := time.Second
	f.joined, f.since, f.seen, f.heard = true, now.Add(-time.Hour), 10, now
	now = now.Add(time.Second)
	asked := now
	f.mark(12, asked) // etcd is at revision 12
	now = now.Add(time.Second)
	f.reached(10) // the watch's member answers, at its old revision, again and again
	f.reached(11)
	if _, s := f.mode(iv); s || !strings.HasPrefix(f.stale(now), "etcd unreachable") {
		t.Fatalf("the watch answers at revision 11 of 12 for 2 s: want the replica alone (%q)", f.stale(now))
	}
	f.reached(12)
	if !f.heard.Equal(asked) {
		t.Fatalf("heard %v, want the time of the read the watch caught up with (%v)", f.heard, asked)
	}
	if f.stale(now) != "" {
		t.Fatalf("the watch delivered up to etcd's revision of 1 s ago: want the view fresh (%q)", f.stale(now))
	}
	// A read whose revision the mirror already has: current at once.
	now = now.Add(time.Second)
	f.mark(12, now)
	if !f.heard.Equal(now) || len(f.marks) != 0 {
		t.Fatalf("heard %v, %d marks: want now and none", f.heard, len(f.marks))
	}
}

// F-1, F-4: the lease outlives a renewal that takes the whole timeout: the timeout plus a second,
// in whole seconds, at least 3 s; it is renewed at least three times per TTL.
func TestLeaseTTL(t *testing.T) {
	for _, tc := range []struct{ timeout, want time.Duration }{
		{100 * time.Millisecond, 3 * time.Second},
		{time.Second, 3 * time.Second},
		{1500 * time.Millisecond, 3 * time.Second},
		{2500 * time.Millisecond, 4 * time.Second},
		{3 * time.Second, 4 * time.Second},
		{time.Minute, 61 * time.Second},
	} {
		if got := leaseTTL(tc.timeout); got != tc.want {
			t.Errorf("timeout %s: TTL %s, want %s", tc.timeout, got, tc.want)
		}
		ttl := leaseTTL(tc.timeout)
		if every := renewEvery(ttl); every > ttl/3 || every+tc.timeout >= ttl {
			t.Errorf("timeout %s: renewal every %s with TTL %s: a renewal that takes the whole timeout lands after the lease expired", tc.timeout, every, ttl)
		}
	}
}

// flipScript answers success or failure as the test says, for one replica; nores makes it
// produce no result (HC-3), as a prober that cannot run.
type flipScript struct {
	mu       sync.Mutex
	nores    bool
	attempts int
	pattern  func(n int) bool // when set: failure on attempt n
}

func (s *flipScript) probe(context.Context, *checkRun, int, netip.AddrPort, string) attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts++
	switch {
	case s.nores:
		return attempt{outcome: noResult, reason: "cannot run"}
	case s.pattern != nil && s.pattern(s.attempts):
		return attempt{outcome: failure, reason: "status 503"}
	}
	return attempt{outcome: success}
}

// F-3: "every replica with the same Corefile reaches the same verdict". Two members of us-east1,
// replicas_per_region 1: a probes the target, b only reads what a publishes. Thresholds 10. The
// target fails 9 rounds out of 10. a's prober, healthy before the flapping started, stays
// healthy (never 10 failures in a row). b joins during the flapping; its own probes give no
// result. Whatever their histories, both decide from a's published prober state, at every
// moment: a verdict is a pure function of etcd's contents, not of a replica's own streak.
func TestFleetLateJoinerSameVerdictF3(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	prefix := "/test/latejoiner"
	// A target a wins in us-east1 against b (rendezvous): b never probes it while shared.
	tg := winsIn(t, 87, []string{"a", "b"}, "a", "us-east1")
	check := func() *Check {
		c := fleetCheck(time.Second, "us-east1")
		c.HealthyThreshold, c.UnhealthyThreshold = 10, 10
		return c
	}
	sa := &flipScript{}
	a := startProbeReplica(t, testFleetConfig(etcd.Endpoint, prefix, "a", 1), check(), sa.probe, tg)
	waitFor30(t, "a decides Healthy from the fleet", func() bool {
		_, shared := joinedMode(a.f)
		return shared && a.status(0).State == health.Healthy
	})
	sa.mu.Lock()
	base := sa.attempts
	sa.pattern = func(n int) bool { return (n-base)%10 != 0 }
	sa.mu.Unlock()
	sb := &flipScript{nores: true}
	b := startProbeReplica(t, testFleetConfig(etcd.Endpoint, prefix, "b", 1), check(), sb.probe, tg)
	waitFor30(t, "b's first verdict", func() bool { return b.status(0).State != health.Unknown })
	agreeThroughout(t, 3*check().Interval, []*replica{a, b})
	if st := b.status(0); st.State != health.Healthy || st.Reason != "fleet: 1/1 regions healthy" {
		t.Errorf("b: %v (%s), want a's healthy prober's verdict", st.State, st.Reason)
	}
}

// winsIn returns a target of 127.0.X.0/24, port 80, that replica me probes from region among
// members (rendezvous, replicas_per_region 1).
func winsIn(t *testing.T, x byte, members []string, me, region string) netip.AddrPort {
	t.Helper()
	for i := 1; i < 250; i++ {
		tg := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, x, byte(i)}), 80)
		if chosen(members, me, "web|"+tg.String()+"|"+region, 1) {
			return tg
		}
	}
	t.Fatalf("no target of 127.0.%d.0/24 that %s probes", x, me)
	return netip.AddrPort{}
}

// F-3: when the fleet starts deciding (one interval after the join), its verdicts replace the
// replica's own at once, not at each target's next round; what b read at its join counts as
// received (F-3's results of the others, fleet_results_received_total). a probes the target in us-east1 and
// publishes nothing new (steady); b joins (us-east1, not chosen for it), decides alone at its
// first round (at once), and has the fleet's verdict about one interval (4 s) after its join;
// its rounds would bring it only at 8 s (the one at 4 s is planned just before the switch).
func TestFleetDecidesAtWarmEndF3(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	const prefix = "/test/warmend"
	iv := 4 * time.Second
	tg := winsIn(t, 89, []string{"a", "b"}, "a", "us-east1")
	a := startProbeReplica(t, testFleetConfig(etcd.Endpoint, prefix, "a", 1), fleetCheck(iv, "us-east1"), (&flipScript{}).probe, tg)
	waitFor30(t, "a decides from the fleet", func() bool { return strings.HasPrefix(a.status(0).Reason, "fleet: ") })
	b := startReplicaJitter(t, testFleetConfig(etcd.Endpoint, prefix, "b", 1), fleetCheck(iv, "us-east1"), (&flipScript{}).probe, noJitter, tg)
	var joined time.Time
	waitFor30(t, "b joins", func() bool {
		b.f.mu.RLock()
		defer b.f.mu.RUnlock()
		joined = b.f.since
		return b.f.joined
	})
	// a's result, published before b joined and not changed since, is one b received: read at
	// its join (the watch brings nothing new). Regression: counted from the watch only, b's
	// fleet_results_received_total stayed 0 (TestFleetReplicasAgreeF3F4 failed on it).
	waitFor30(t, "b counts a's result as received", func() bool {
		return gaugeValue(t, "coredns_healthcheck_fleet_results_received_total", "b") > 0
	})
	waitFor30(t, "b's own verdict", func() bool { return b.status(0).State == health.Healthy })
	waitFor30(t, "b has the fleet's verdict", func() bool { return strings.HasPrefix(b.status(0).Reason, "fleet: ") })
	if d := time.Since(joined); d > iv+iv/2 {
		t.Errorf("b had the fleet's verdict %s after its join, want about one interval (%s)", d, iv)
	}
}

// F-3: a round planned while the replica decided alone that finishes once the fleet decides
// does not overwrite the fleet's verdict with the replica's own. a (us-east1) and c
// (europe-west1) serve a target healthy from their regions; d (asia-east1), where it fails,
// joins with a round in flight (its probe answers only when the test says so); the round ends
// after d has the fleet's healthy, and d keeps serving the target.
func TestFleetRoundInFlightAtSwitchF3(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	const prefix = "/test/inflight"
	tg := netip.MustParseAddrPort("127.0.89.1:80")
	script := newRegionScript()
	script.set(tg, "us-east1", "europe-west1")
	iv := time.Second
	a := startReplica(t, testFleetConfig(etcd.Endpoint, prefix, "a", 1), fleetCheck(iv, "us-east1"), script, tg)
	c := startReplica(t, testFleetConfig(etcd.Endpoint, prefix, "c", 1), fleetCheck(iv, "europe-west1"), script, tg)
	waitFor30(t, "a and c serve the target from the fleet", func() bool {
		for _, rp := range []*replica{a, c} {
			if st := rp.status(0); st.State != health.Healthy || !strings.HasPrefix(st.Reason, "fleet: ") {
				return false
			}
		}
		return true
	})
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	slow := func(context.Context, *checkRun, int, netip.AddrPort, string) attempt {
		<-gate // beyond the probe's timeout: the round spans the switch to the fleet's verdicts
		return attempt{outcome: failure, reason: "refused from asia-east1"}
	}
	d := startReplicaJitter(t, testFleetConfig(etcd.Endpoint, prefix, "d", 1), fleetCheck(iv, "asia-east1"), slow, noJitter, tg)
	t.Cleanup(open) // before d stops: its registry waits for the round
	waitFor30(t, "d has the fleet's verdict", func() bool { return d.status(0).Reason == "fleet: 2/2 regions healthy" })
	r0 := d.reg.rounds.Load()
	open()
	waitFor30(t, "the round in flight ends", func() bool { return d.reg.rounds.Load() > r0 })
	if st := d.status(0); st.State != health.Healthy || !strings.HasPrefix(st.Reason, "fleet: ") {
		t.Fatalf("d: %v (%s) after its round planned alone ended, want the fleet's healthy", st.State, st.Reason)
	}
}

// F-3 when no prober of any member has a state for a (check, target): the verdict is still a
// function of etcd's contents, Unknown on every replica (served, H-2; no result is no failure,
// HC-3), not whatever a replica decided before. Members of us-east1, replicas_per_region 1: c
// probes the target (it fails), a and b only read; their own probes give no result. a serves
// the fleet's Unhealthy; c leaves, its lease and results with it; b joins afterwards. With the
// same keys in etcd (no state of the target at all), a and b say the same: Unknown.
func TestFleetNoStateSameVerdictF3(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	const prefix = "/test/nostate"
	// A target c wins in us-east1 against a and b (rendezvous).
	tg := winsIn(t, 88, []string{"a", "b", "c"}, "c", "us-east1")
	iv := time.Second
	c := startProbeReplica(t, testFleetConfig(etcd.Endpoint, prefix, "c", 1), fleetCheck(iv, "us-east1"), (&flipScript{pattern: func(int) bool { return true }}).probe, tg)
	a := startProbeReplica(t, testFleetConfig(etcd.Endpoint, prefix, "a", 1), fleetCheck(iv, "us-east1"), (&flipScript{nores: true}).probe, tg)
	waitFor30(t, "a serves the fleet's unhealthy", func() bool {
		st := a.status(0)
		return st.State == health.Unhealthy && st.Reason == "fleet: 0/1 regions healthy (us-east1: status 503)"
	})
	c.stop() // its lease is revoked: no prober of the fleet has a state of the target any more
	b := startProbeReplica(t, testFleetConfig(etcd.Endpoint, prefix, "b", 1), fleetCheck(iv, "us-east1"), (&flipScript{nores: true}).probe, tg)
	waitFor30(t, "b decides from the fleet", func() bool { _, s := joinedMode(b.f); return s })
	// b's verdict is the fleet's from its first round planned once the fleet decides (the one in
	// flight may have been planned before).
	r0 := b.reg.rounds.Load()
	waitFor30(t, "two rounds of b", func() bool { return b.reg.rounds.Load() >= r0+2 })
	agreeThroughout(t, 2*iv, []*replica{a, b})
	if st := b.status(0); st.State != health.Unknown || st.Reason != "fleet: no prober has a state" {
		t.Errorf("b: %v (%s), want unknown: no prober of the fleet has a state", st.State, st.Reason)
	}
}

// reloadReplica does to rp what a Corefile reload does with check c in place of rp's: the new
// instance registers its view and acquires every target with a new checkRun, then the old
// instance releases its probes and leaves.
func reloadReplica(rp *replica, cfg *fleetConfig, c *Check) {
	view := newFleetView([]*Check{c})
	f := joinFleet(cfg, view)
	run := newCheckRun(c)
	run.fleet = &fleetRun{f: f, perRegion: cfg.ReplicasPerRegion}
	probes := make([]*probe, 0, len(rp.probes))
	for i, p := range rp.probes {
		np := rp.reg.acquire(run, p.key.target)
		rp.reg.attach(np, rp.bts[i])
		probes = append(probes, np)
	}
	for i, p := range rp.probes {
		rp.reg.detach(p, rp.bts[i])
		rp.reg.release(p, rp.run)
	}
	rp.f.leave(rp.view)
	rp.f, rp.view, rp.run, rp.probes = f, view, run, probes
}

// F-3: after a reload that drops a prober region from a check (on every replica: the same new
// Corefile everywhere), the results published for that region are withdrawn and stop counting
// at once. Two replicas probing from us-east1 and europe-west1 (bare metal: each server has a
// source address in both), replicas_per_region 1. The target answers from us-east1 only: 1/2
// regions, unhealthy. After the reload the check has us-east1 only: 1/1, healthy everywhere,
// and no europe-west1 result is left in etcd.
func TestFleetReloadDroppedRegionWithdrawnF3(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	cli := etcd.Client(t)
	prefix := "/test/droppedregion"
	tg := netip.MustParseAddrPort("127.0.86.1:80")
	script := newRegionScript()
	script.set(tg, "us-east1")
	iv := time.Second
	cfgs := []*fleetConfig{testFleetConfig(etcd.Endpoint, prefix, "x", 1), testFleetConfig(etcd.Endpoint, prefix, "y", 1)}
	rs := []*replica{
		startReplica(t, cfgs[0], fleetCheck(iv, "us-east1", "europe-west1"), script, tg),
		startReplica(t, cfgs[1], fleetCheck(iv, "us-east1", "europe-west1"), script, tg),
	}
	waitFor30(t, "both replicas decide 1/2 from the fleet", func() bool {
		for _, rp := range rs {
			if _, shared := joinedMode(rp.f); !shared || rp.status(0).Reason != "fleet: 1/2 regions healthy (europe-west1: refused from europe-west1)" {
				return false
			}
		}
		return true
	})
	for i, rp := range rs {
		reloadReplica(rp, cfgs[i], fleetCheck(iv, "us-east1"))
	}
	// Within a round of each replica (plus the watch), every replica decides 1/1.
	waitUntil(t, 3*iv, "every replica healthy from us-east1 alone", func() bool {
		for _, rp := range rs {
			if rp.status(0).Reason != "fleet: 1/1 regions healthy" {
				return false
			}
		}
		return true
	})
	waitUntil(t, 3*iv, "europe-west1's results withdrawn", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := cli.Get(ctx, prefix+resultsDir, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return false
		}
		for _, kv := range r.Kvs {
			if strings.Contains(string(kv.GetKey()), "/europe-west1/") {
				return false
			}
		}
		return true
	})
}

// waitUntil polls cond every 10 ms and fails t when it does not hold within d plus a second
// (the etcd round trips of a loaded machine).
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d + time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d+time.Second)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// F-3: the verdict is a function of what etcd holds and nothing else. Two replicas whose mirrors
// hold the same keys get the same tallies, even when one of them (a, the prober) has a new state
// of its own that it has not written yet: a counts its own result as etcd holds it, like b.
func TestFleetSharedReadsEtcdOnlyF3(t *testing.T) {
	now := time.Unix(1000, 0)
	iv := time.Second
	pair := pairKey{check: "web", target: "10.0.0.1:80"}
	keys := map[string]string{
		"/p/members/a":                          `{"nonce":"` + processNonce + `","checks":{"web":["us-east1"]}}`,
		"/p/members/b":                          `{"nonce":"` + processNonce + `","checks":{"web":["us-east1"]}}`,
		"/p/results/web/10.0.0.1:80/us-east1/a": encodeResult(tally{region: "us-east1", ok: 1, got: 1}),
	}
	replica := func(name string) *fleet {
		f := &fleet{cfg: &fleetConfig{Replica: name, Timeout: time.Second}, now: func() time.Time { return now }, mirror: newMirror()}
		f.joined, f.since, f.heard = true, now.Add(-iv), now
		for k, v := range keys {
			if _, err := f.mirror.apply("/p", k, []byte(v)); err != nil {
				t.Fatal(err)
			}
		}
		return f
	}
	a, b := replica("a"), replica("b")
	// a's prober just turned unhealthy; the write is due, etcd does not have it yet.
	a.want = map[pairKey]map[string]tally{pair: {"us-east1": {region: "us-east1", ok: 0, got: 1, failure: "timeout"}}}
	ta, oka := a.shared(pair, iv)
	tb, okb := b.shared(pair, iv)
	if !oka || !okb {
		t.Fatalf("the fleet does not decide: a %v, b %v", oka, okb)
	}
	if va, vb := aggregate(ta), aggregate(tb); va != vb || va.outcome != success {
		t.Fatalf("same keys in etcd, different verdicts: a %+v, b %+v (want both healthy, as etcd says)", va, vb)
	}
}
