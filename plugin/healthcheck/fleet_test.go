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
	b := health.NewBoard(time.Now)
	r := NewRegistry(b, realClock{})
	r.probe = script.probe
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
	waitFor30(t, "every replica decides from the fleet", func() bool {
		for _, rp := range rs {
			if rp.status(0).State != health.Healthy || rp.status(1).State != health.Unhealthy {
				return false
			}
		}
		return true
	})
	// Alone, c would serve the 1-of-3 target and d would not serve the 2-of-3 one.
	if r := rs[2].status(1).Reason; !strings.Contains(r, "fleet: 1/3 regions healthy") {
		t.Errorf("replica c: reason %q, want the fleet's 1/3 regions healthy", r)
	}
	if r := rs[3].status(0).Reason; !strings.Contains(r, "fleet: 2/3 regions healthy") {
		t.Errorf("replica d: reason %q, want the fleet's 2/3 regions healthy", r)
	}
	// F-2: over three intervals each (target, region) is probed by one replica of the region.
	script.take()
	time.Sleep(3 * time.Second) // a measurement window, not a synchronization
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

// F-4: the fleet decides a check only while etcd answered within the timeout and within 3
// intervals (a shared verdict is never older), and one interval after a join or an outage, once
// every member had a round to publish; otherwise the replica decides alone.
func TestFleetModeF4(t *testing.T) {
	now := time.Unix(1000, 0)
	f := &fleet{cfg: &fleetConfig{Timeout: 10 * time.Second}, now: func() time.Time { return now }}
	iv := time.Second
	if j, s := f.mode(iv); j || s {
		t.Fatalf("not joined: joined %v shared %v", j, s)
	}
	f.joined, f.since, f.confirmed = true, now.Add(-500*time.Millisecond), now
	if j, s := f.mode(iv); !j || s {
		t.Fatalf("joined half an interval ago: joined %v shared %v, want joined and deciding alone", j, s)
	}
	f.since = now.Add(-iv)
	if _, s := f.mode(iv); !s {
		t.Fatal("joined an interval ago and confirmed now: want shared")
	}
	f.confirmed = now.Add(-3*iv - time.Millisecond)
	if _, s := f.mode(iv); s {
		t.Fatal("etcd last answered more than 3 intervals ago: want the replica alone")
	}
	f.since = now.Add(-time.Hour)
	if _, s := f.mode(10 * iv); !s {
		t.Fatal("3.001 s is within 3 intervals of 10 s and within the timeout: want shared")
	}
	f.cfg.Timeout = time.Second
	if _, s := f.mode(10 * iv); s {
		t.Fatal("etcd last answered beyond the beat and the timeout: want the replica alone")
	}
	f.confirmed, f.dup = now, true
	if _, s := f.mode(iv); s {
		t.Fatal("a duplicate replica name: want the replica alone")
	}
}
