package healthcheck

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/etcdtest"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The ways etcd fails while it still seems up (F-4): it refuses writes, or one member of a
// cluster hangs with its connections open.

// staleWithin is how soon a replica must stop deciding from a view that went stale: the renewal
// period and the timeout, the next beat that notices, and a second of slack for a loaded machine.
func staleWithin(timeout time.Duration) time.Duration {
	return 2*fleetBeat + timeout + time.Second
}

// F-4: etcd that answers but refuses writes (its space quota exceeded: the NOSPACE alarm, a
// classic etcd failure) keeps renewing leases and serving the watch, but nothing new is
// published: the fleet's view freezes. Three replicas, one per region; after the alarm the
// target fails from us-east1 and europe-west1 (really 1/3 regions healthy). a and c cannot
// publish what they see: their failed writes make them decide alone. d has nothing to write, but
// etcd's alarm says the others' results are frozen: it decides alone too, rather than from
// their frozen healthy states.
func TestFleetWritesRefusedF4(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t, "--quota-backend-bytes", "2000000")
	const prefix = "/test/nospace"
	tg := netip.MustParseAddrPort("127.0.86.20:80")
	script := newRegionScript()
	script.set(tg, "us-east1", "europe-west1", "asia-east1")
	iv, timeout := time.Second, time.Second
	rs := threeRegions(t, etcd.Endpoint, prefix, iv, timeout, 1, script, tg)
	a, d := rs[0], rs[2]
	waitFor30(t, "the fleet decides", func() bool {
		for _, rp := range rs {
			if _, s := joinedMode(rp.f); !s || rp.status(0).Reason != "fleet: 3/3 regions healthy" {
				return false
			}
		}
		return true
	})
	fill(t, etcd.Client(t))
	script.set(tg, "asia-east1") // from now on: healthy from 1 of 3 regions
	waitUntil(t, staleWithin(timeout)+iv, "a decides alone that the target is down", func() bool {
		st := a.status(0)
		return st.State == health.Unhealthy && !strings.HasPrefix(st.Reason, "fleet:")
	})
	waitUntil(t, staleWithin(timeout)+iv, "d stops deciding from the frozen results", func() bool {
		_, s := joinedMode(d.f)
		return !s && !strings.HasPrefix(d.status(0).Reason, "fleet:")
	})
	if v := gaugeValue(t, "coredns_healthcheck_fleet_fallback", "d"); v != 1 {
		t.Errorf("d's fallback gauge %v, want 1", v)
	}
}

// threeRegions starts replicas a (us-east1), c (europe-west1) and d (asia-east1), one per prober
// region, with replicas_per_region 1, the fleet timeout and the check's interval and thresholds.
func threeRegions(t *testing.T, endpoint, prefix string, iv, timeout time.Duration, threshold int, script *regionScript, tg netip.AddrPort) []*replica {
	t.Helper()
	rs := make([]*replica, 0, 3)
	for _, l := range []struct{ name, region string }{{"a", "us-east1"}, {"c", "europe-west1"}, {"d", "asia-east1"}} {
		c := fleetCheck(iv, l.region)
		c.HealthyThreshold, c.UnhealthyThreshold = threshold, threshold
		cfg := testFleetConfig(endpoint, prefix, l.name, 1)
		cfg.Timeout = timeout
		rs = append(rs, startReplica(t, cfg, c, script, tg))
	}
	return rs
}

// fill writes to etcd until its space quota is exceeded (the NOSPACE alarm).
func fill(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	big := strings.Repeat("x", 100000)
	for i := range 1000 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cli.Put(ctx, fmt.Sprintf("/filler/%d", i), big)
		cancel()
		if err != nil {
			t.Logf("etcd refuses writes: %v", err)
			return
		}
	}
	t.Fatal("the quota was never reached")
}

// F-4, split brain: an etcd cluster of three members, one of which stops answering (paused: a
// hung host, its connections open). Lease renewals still succeed through the other two; a watch
// on the paused member neither delivers nor fails. The replica must not go on deciding from a
// view the watch no longer updates: within the renewal period plus the timeout it decides alone
// (only a watch that has delivered what etcd holds says the view is current), and it comes back
// to a current view (its watch restarted on another member) by itself. Each member is paused in
// turn, so the watch's own member is among them.
//
// The test writes w's result with a new value each time (strictly increasing prober counts) and
// compares r's mirror with what etcd holds, read back through the members that answer: a write
// the test had to retry (its first attempt timed out during an election) may land after a later
// one, so the last value written is not always what etcd holds.
func TestFleetWatchOnHungMemberF4(t *testing.T) {
	leakCheck(t)
	ms := etcdtest.NewCluster(t, 3)
	eps := make([]string, 0, len(ms))
	for _, m := range ms {
		eps = append(eps, m.Endpoint)
	}
	const prefix = "/test/hung"
	tg := netip.MustParseAddrPort("127.0.89.1:80")
	script := newRegionScript()
	script.set(tg, "europe-west1")
	// w: a member of us-east1 whose result the test writes itself, under a long lease.
	cli := etcdtest.Client(t, nil, eps...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	g, err := cli.Grant(ctx, 300)
	if err == nil {
		_, err = cli.Put(ctx, memberKey(prefix, "w"), `{"nonce":"w","checks":{"web":["us-east1"]}}`, clientv3.WithLease(g.ID))
	}
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	resKey := prefix + resultsDir + "web/" + tg.String() + "/us-east1/w"
	write := func(via *clientv3.Client, seq int) {
		t.Helper()
		// A paused leader: the others elect a new one first.
		waitFor30(t, "the write of w's result", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := via.Put(ctx, resKey, fmt.Sprintf(`{"nonce":"w","healthy":%d,"decided":%d}`, seq, seq), clientv3.WithLease(g.ID))
			return err == nil
		})
	}
	// held returns the sequence number of w's result as etcd holds it, 0 when the read fails.
	held := func(via *clientv3.Client) int {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, err := via.Get(ctx, resKey)
		if err != nil || len(r.Kvs) != 1 {
			return 0
		}
		var v resultValue
		if json.Unmarshal(r.Kvs[0].GetValue(), &v) != nil {
			return 0
		}
		return v.Decided
	}
	write(cli, 1)
	timeout := time.Second
	cfg := testFleetConfig(eps[0], prefix, "r", 1)
	cfg.Endpoints, cfg.Timeout = eps, timeout
	r := startReplica(t, cfg, fleetCheck(time.Second, "europe-west1"), script, tg)
	has := func(seq int) bool {
		r.f.mu.RLock()
		defer r.f.mu.RUnlock()
		for _, s := range r.f.mirror.results[pairKey{check: "web", target: tg.String()}] {
			if s.member == "w" && s.tally.got == seq {
				return true
			}
		}
		return false
	}
	shared := func() bool { _, s := joinedMode(r.f); return s }
	waitFor30(t, "r shares w's result", func() bool { return shared() && has(1) })
	seq := 1
	for i, m := range ms {
		m.Pause()
		others := etcdtest.Client(t, nil, append(append([]string{}, eps[:i]...), eps[i+1:]...)...)
		seq++
		write(others, seq)
		// stale is the longest r decided from the fleet while its mirror lacked a value etcd had
		// held for that long (since the read that first showed it).
		var (
			cur   int
			since time.Time
			stale time.Duration
		)
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if v := held(others); v != 0 && v != cur {
				cur, since = v, time.Now()
			}
			if cur == 0 {
				continue
			}
			if has(cur) {
				break
			}
			if shared() {
				stale = max(stale, time.Since(since))
			}
		}
		seen := cur != 0 && has(cur)
		m.Resume()
		if stale > staleWithin(timeout) {
			t.Fatalf("member %s paused: r decided from the fleet %.1fs after etcd held w's result %d without having it (seen at last: %v; timeout %s)", m.Endpoint, stale.Seconds(), cur, seen, timeout)
		}
		t.Logf("member %s paused: etcd holds %d (written %d), seen %v, decided from a stale view for %.1fs", m.Endpoint, cur, seq, seen, stale.Seconds())
		waitFor30(t, "r back to sharing what etcd holds", func() bool { v := held(cli); return v != 0 && shared() && has(v) })
	}
}

// F-4: "never serves a shared verdict older than 3 intervals as fresh", and a replica that
// falls back decides alone from its first round: the fleet's verdict does not stay for a
// threshold's worth of rounds. Three replicas, one per region; the target answers from us-east1
// and europe-west1, not from asia-east1: the fleet says healthy (2/3), d (asia-east1) alone says
// unhealthy. Thresholds 5. etcd stops: within the renewal period, the timeout and a round, d
// decides alone (unhealthy) and a (us-east1), whose own verdict is the fleet's, says so in its
// reason, which no longer starts with "fleet:".
func TestFleetFallbackDropsSharedVerdictF4(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	const prefix = "/test/fallbackstale"
	tg := netip.MustParseAddrPort("127.0.86.5:80")
	script := newRegionScript()
	script.set(tg, "us-east1", "europe-west1")
	iv, timeout := time.Second, time.Second
	rs := threeRegions(t, etcd.Endpoint, prefix, iv, timeout, 5, script, tg)
	a, d := rs[0], rs[2]
	waitFor30(t, "a and d serve the fleet's Healthy", func() bool {
		return a.status(0).Reason == "fleet: 2/3 regions healthy" && d.status(0).Reason == "fleet: 2/3 regions healthy"
	})
	etcd.Stop()
	waitUntil(t, staleWithin(timeout)+iv, "d decides alone", func() bool {
		st := d.status(0)
		return st.State == health.Unhealthy && st.Reason == "0/1 regions healthy (asia-east1: refused from asia-east1)"
	})
	waitUntil(t, staleWithin(timeout)+iv, "a's reason is its own", func() bool {
		st := a.status(0)
		return st.State == health.Healthy && st.Reason == "1/1 regions healthy"
	})
}

// F-4: fleet_fallback says whether the replica decides alone, also during the interval after
// joining, when it has joined but still probes and decides alone.
func TestFleetFallbackMetricF4(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	const prefix = "/test/fallbackmetric"
	iv := 2 * time.Second
	r := startReplica(t, testFleetConfig(etcd.Endpoint, prefix, "m", 1), fleetCheck(iv, "us-east1"), newRegionScript(), netip.MustParseAddrPort("127.0.86.6:80"))
	joined := false
	waitFor30(t, "the fleet decides", func() bool {
		g := gaugeValue(t, "coredns_healthcheck_fleet_fallback", "m")
		j, s := joinedMode(r.f)
		if g == 0 && !s {
			t.Fatalf("fleet_fallback 0 while the replica decides alone (joined %v)", j)
		}
		joined = joined || (j && !s && g == 1)
		return g == 0
	})
	if !joined {
		t.Error("never saw the replica joined and deciding alone with fleet_fallback 1")
	}
}

// F-4: a replica that falls back starts its own thresholds again (a new streak from its first
// round), rather than going on from the streak it had before the fleet decided. Three replicas,
// one per region, thresholds 5. The target answers everywhere at first: d (asia-east1) decides
// it healthy alone while it warms up. Then it answers from us-east1 only: the fleet says
// unhealthy (1/3), and d serves that. etcd stops: d, alone, fails the target from asia-east1; its
// old streak (healthy, one failure) would serve it again, a new one keeps it unhealthy.
func TestFleetFallbackRestartsStreakF4(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	const prefix = "/test/fallbackstreak"
	tg := netip.MustParseAddrPort("127.0.86.8:80")
	script := newRegionScript()
	script.set(tg, "us-east1", "europe-west1", "asia-east1")
	iv, timeout := time.Second, time.Second
	rs := threeRegions(t, etcd.Endpoint, prefix, iv, timeout, 5, script, tg)
	d := rs[2]
	waitFor30(t, "d serves the fleet's healthy", func() bool { return d.status(0).Reason == "fleet: 3/3 regions healthy" })
	script.set(tg, "us-east1")
	waitFor30(t, "d serves the fleet's unhealthy", func() bool { return strings.HasPrefix(d.status(0).Reason, "fleet: 1/3 regions healthy") })
	etcd.Stop()
	waitUntil(t, staleWithin(timeout)+iv, "d decides alone", func() bool {
		return !strings.HasPrefix(d.status(0).Reason, "fleet:")
	})
	for end := time.Now().Add(2 * iv); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if st := d.status(0); st.State != health.Unhealthy {
			t.Fatalf("d alone, its own probes failing: %v (%s), want unhealthy", st.State, st.Reason)
		}
	}
}

// F-4: only etcd's alarms (NOSPACE, CORRUPT: it refuses writes) make the view stale; the other
// errors of its status are logged, not taken for alarms. An alarm raised through etcd's API is
// seen and cleared; a member of a cluster that lost its other two members reports "no leader"
// in its status, which is not an alarm (the watch, which requires a leader, judges that).
func TestFleetOnlyAlarmsAreAlarmsF4(t *testing.T) {
	leakCheck(t)
	logs := coretest.CaptureLog(t)
	ms := etcdtest.NewCluster(t, 3)
	cli := ms[0].Client(t)
	f := newFleet(testFleetConfig(ms[0].Endpoint, "/test/alarms", "r1", 1))
	defer fleetSeries.Release("r1")
	f.cli = cli
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, ms[0].Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	alarm := &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: st.Header.GetMemberId(), Alarm: pb.AlarmType_NOSPACE}
	if _, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Alarm(ctx, alarm); err != nil {
		t.Fatal(err)
	}
	f.heard = f.now() // the watch is not what this test is about
	f.checkAlarms(ctx)
	if why := f.stale(f.now()); !strings.Contains(why, "NOSPACE") {
		t.Fatalf("alarm %q, stale %q: want NOSPACE", f.alarm, why)
	}
	if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: st.Header.GetMemberId(), Alarm: pb.AlarmType_NOSPACE}); err != nil {
		t.Fatal(err)
	}
	f.checkAlarms(ctx)
	if f.alarm != "" {
		t.Fatalf("alarm %q after the disarm, want none", f.alarm)
	}
	ms[1].Stop()
	ms[2].Stop()
	waitFor30(t, "the member without a leader says so", func() bool {
		c, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		st, err := cli.Status(c, ms[0].Endpoint)
		return err == nil && len(st.Errors) > 0
	})
	f.checkAlarms(ctx)
	if f.alarm != "" {
		t.Fatalf("alarm %q from a status error that is no alarm", f.alarm)
	}
	if logs.Count("(replica r1): etcd reports", "no leader") != 1 {
		t.Fatalf("the status error is not logged once:\n%s", logs.String())
	}
}

// F-1: the lease is renewed on time whatever else the session waits for. Each of the session's
// requests may take the whole timeout (a write, a list, one sent to a member that hangs), several
// in a beat; a renewal that waited behind them would let the lease expire while etcd answers.
// Here the session's loop is held for longer than the TTL (the test holds the fleet's lock,
// which the loop takes at every beat): the member key must stay, under the same lease.
func TestFleetRenewalNotDelayedF1(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	cli := etcd.Client(t)
	const prefix = "/test/renewal"
	cfg := testFleetConfig(etcd.Endpoint, prefix, "r1", 1)
	cfg.Timeout = time.Second
	v := newFleetView([]*Check{fleetCheck(time.Second, "us-east1")})
	f := joinFleet(cfg, v)
	defer f.leave(v)
	waitFor(t, "joined", func() bool { j, _ := joinedMode(f); return j })
	lease := member(t, cli, prefix, "r1").Kvs[0].GetLease()
	hold := leaseTTL(cfg.Timeout) + time.Second
	f.mu.Lock()
	gone := false
	for end := time.Now().Add(hold); time.Now().Before(end) && !gone; time.Sleep(50 * time.Millisecond) {
		gone = len(member(t, cli, prefix, "r1").Kvs) == 0
	}
	f.mu.Unlock()
	if m := member(t, cli, prefix, "r1"); gone || len(m.Kvs) != 1 || m.Kvs[0].GetLease() != lease {
		t.Fatalf("member %v, want it under lease %x: the lease (TTL %s) expired while the session's loop was busy", m.Kvs, lease, leaseTTL(cfg.Timeout))
	}
}
