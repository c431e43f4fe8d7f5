package healthcheck

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/etcdtest"
)

// fleetTimeout is the fleet timeout of the replica processes: short, so that an outage is
// noticed in a few seconds, and long enough that a loaded machine (the race detector, other
// tests) does not make a replica think etcd went silent.
const fleetTimeout = 2 * time.Second

// fleetCorefile is the one Corefile of every replica of the fleet tests: what differs between
// replicas comes from the environment, as in deploy/kubernetes (REGION, SOURCE, REPLICA, and the
// test's own ports).
func fleetCorefile(etcd, prefix string, port uint16, rdata string, perRegion, threshold int, interval time.Duration) string {
	return fmt.Sprintf(`steer.test:{$DNSPORT} {
	bind {$ADDR}
	prometheus {$ADDR}:{$METRICSPORT}
	healthcheck {
		check web {
			protocol http
			port %d
			path /health
			interval %s
			timeout 500ms
			healthy_threshold %d
			unhealthy_threshold %d
			prober {$REGION} {$SOURCE}
		}
		fleet etcd %s {
			prefix %s
			replica {$REPLICA}
			replicas_per_region %d
			timeout %s
		}
	}
	routingpolicy {
		wrr www A 30 "1=%s" healthcheck web
	}
}
`, port, interval, threshold, threshold, etcd, prefix, perRegion, fleetTimeout, rdata)
}

// deciding reports whether the fleet decides on every replica: none probes and decides alone.
func deciding(rs ...*replicaProc) bool {
	for _, rp := range rs {
		if rp.Metric(`coredns_healthcheck_fleet_fallback{replica="`+rp.Name+`"}`) != 0 {
			return false
		}
	}
	return true
}

// agreed waits until every replica answers want for www.steer.test.
func agreed(t *testing.T, what string, rs []*replicaProc, want ...string) {
	t.Helper()
	waitFor30(t, what, func() bool {
		for _, rp := range rs {
			if got, err := rp.Answer("www.steer.test"); err != nil || !slices.Equal(got, want) {
				return false
			}
		}
		return true
	})
}

// answerThroughout checks, every 50 ms for d, that every replica answers want for
// www.steer.test at the same moment (F-3), not only eventually.
func answerThroughout(t *testing.T, d time.Duration, rs []*replicaProc, want ...string) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		for _, rp := range rs {
			if got, err := rp.Answer("www.steer.test"); err != nil || !slices.Equal(got, want) {
				t.Fatalf("replica %s answers %v (%v), want %v like the others; its log:\n%s", rp.Name, got, err, want, rp.logs)
			}
		}
	}
}

// load queries every replica without pause until stop, counting the queries that failed (an
// error, a timeout, an rcode other than NOERROR, or no address).
type load struct {
	wg             sync.WaitGroup
	quit           chan struct{}
	sent, failures atomic.Int64
	mu             sync.Mutex
	firstFailure   string
}

func startLoad(rs []*replicaProc) *load {
	l := &load{quit: make(chan struct{})}
	for _, rp := range rs {
		l.wg.Go(func() {
			for {
				select {
				case <-l.quit:
					return
				default:
				}
				got, err := rp.Answer("www.steer.test")
				l.sent.Add(1)
				if err != nil || len(got) == 0 {
					l.failures.Add(1)
					l.mu.Lock()
					if l.firstFailure == "" {
						l.firstFailure = fmt.Sprintf("replica %s: %v %v", rp.Name, got, err)
					}
					l.mu.Unlock()
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	return l
}

func (l *load) stop() {
	close(l.quit)
	l.wg.Wait()
}

// F-3 and F-4 with real replicas: four replica processes (two in us-east1, one in europe-west1,
// one in asia-east1) share one etcd and probe HTTP targets that answer differently per prober
// source address. Every replica answers the same: the target healthy from 2 of 3 regions is
// served everywhere, the one healthy from 1 of 3 nowhere. etcd stopped under query load: no
// query fails, each replica falls back to deciding alone (logged once, fallback metric 1), and
// then europe-west1's replica serves the 1-of-3 target and asia-east1's drops the 2-of-3 one,
// as a replica alone does; etcd back: every replica rejoins by itself and they agree again.
func TestFleetReplicasAgreeF3F4(t *testing.T) {
	etcd := etcdtest.New(t)
	ts := sourceTargets(t, "127.0.81.1", "127.0.81.2", "127.0.81.3")
	const us1, us2, eu, as = "127.0.90.1", "127.0.90.11", "127.0.90.2", "127.0.90.3"
	ts[0].allow(us1, us2, eu)     // healthy from 2 of 3 regions
	ts[1].allow(eu)               // healthy from 1 of 3
	ts[2].allow(us1, us2, eu, as) // healthy everywhere: the record set never fails open
	t1, t2, t3 := ts[0].addr.Addr().String(), ts[1].addr.Addr().String(), ts[2].addr.Addr().String()
	cf := fleetCorefile(etcd.Endpoint, "/test/agree", ts[0].addr.Port(), t1+","+t2+","+t3, 2, 2, time.Second)
	rs := make([]*replicaProc, 0, 4)
	for _, r := range []struct{ name, region, src string }{
		{"a", "us-east1", us1}, {"b", "us-east1", us2}, {"c", "europe-west1", eu}, {"d", "asia-east1", as},
	} {
		rs = append(rs, startReplicaProc(t, r.name, cf, "REGION="+r.region, "SOURCE="+r.src))
	}
	both := []string{t1, t3}
	slices.Sort(both)
	// A replica decides alone until an interval after its join (the README's Fleet): agreement
	// is asked of replicas whose fleet decides.
	fallback := func(v float64) {
		t.Helper()
		for _, rp := range rs {
			waitFor30(t, fmt.Sprintf("fallback metric %v on %s", v, rp.Name), func() bool {
				return rp.Metric(`coredns_healthcheck_fleet_fallback{replica="`+rp.Name+`"}`) == v
			})
		}
	}
	fallback(0)
	agreed(t, "every replica serves the 2-of-3 target and not the 1-of-3 one", rs, both...)
	answerThroughout(t, 3*time.Second, rs, both...)
	for _, rp := range rs {
		if n := rp.Metric(`coredns_healthcheck_fleet_members{replica="` + rp.Name + `"}`); n != 4 {
			t.Errorf("replica %s sees %v members, want 4", rp.Name, n)
		}
	}

	l := startLoad(rs)
	etcd.Stop()
	c, d := rs[2], rs[3]
	alone := func(rp *replicaProc, want ...string) func() bool {
		slices.Sort(want)
		return func() bool {
			got, err := rp.Answer("www.steer.test")
			return err == nil && slices.Equal(got, want)
		}
	}
	waitFor30(t, "europe-west1's replica alone serves the 1-of-3 target", alone(c, t1, t2, t3))
	waitFor30(t, "asia-east1's replica alone drops the 2-of-3 target", alone(d, t3))
	fallback(1)
	etcd.Start()
	fallback(0)
	agreed(t, "every replica rejoins and they agree again", rs, both...)
	answerThroughout(t, 3*time.Second, rs, both...)
	l.stop()
	if n := l.failures.Load(); n != 0 {
		t.Errorf("%d of %d queries failed during the etcd outage; first: %s", n, l.sent.Load(), l.firstFailure)
	}
	t.Logf("%d queries during the outage, none failed", l.sent.Load())
	for _, rp := range rs {
		for _, m := range []string{"results_published_total", "results_received_total", "etcd_errors_total"} {
			if v := rp.Metric(`coredns_healthcheck_fleet_` + m + `{replica="` + rp.Name + `"}`); v <= 0 {
				t.Errorf("replica %s: fleet_%s %v, want > 0 (it published, received, and saw etcd fail)", rp.Name, m, v)
			}
		}
		logs := rp.logs.String()
		if n := strings.Count(logs, "etcd unreachable"); n != 1 {
			t.Errorf("replica %s logged the outage %d times, want once:\n%s", rp.Name, n, logs)
		}
		if !strings.Contains(logs, "rejoin") {
			t.Errorf("replica %s did not log its rejoin:\n%s", rp.Name, logs)
		}
	}
}

// F-1 and F-2 with real replicas: with replicas_per_region 1, each target gets one probe per
// interval from each region, not one per replica of the region; when a replica dies (killed, its
// lease left to expire) the targets it probed are probed by the other replica of its region
// within the lease TTL and the next round.
func TestFleetShardingF1F2(t *testing.T) {
	etcd := etcdtest.New(t)
	ips := make([]string, 0, 8)
	for i := range 8 {
		ips = append(ips, fmt.Sprintf("127.0.82.%d", i+1))
	}
	ts := sourceTargets(t, ips...)
	const usA, usB, eu = "127.0.90.21", "127.0.90.22", "127.0.90.23"
	for _, st := range ts {
		st.allow(usA, usB, eu)
	}
	cf := fleetCorefile(etcd.Endpoint, "/test/shard", ts[0].addr.Port(), strings.Join(ips, ","), 1, 1, time.Second)
	a := startReplicaProc(t, "a", cf, "REGION=us-east1", "SOURCE="+usA)
	b := startReplicaProc(t, "b", cf, "REGION=us-east1", "SOURCE="+usB)
	c := startReplicaProc(t, "c", cf, "REGION=europe-west1", "SOURCE="+eu)
	probed := func(rp *replicaProc) float64 {
		return rp.Metric(`coredns_healthcheck_fleet_targets_probed{replica="` + rp.Name + `"}`)
	}
	// Alone each replica probes all 8; sharded, a and b share us-east1's and c has all of
	// europe-west1's.
	waitFor30(t, "us-east1's targets split between a and b", func() bool {
		pa, pb := probed(a), probed(b)
		return deciding(a, b, c) && pa > 0 && pb > 0 && pa+pb == 8 && probed(c) == 8
	})
	for _, st := range ts {
		st.take()
	}
	time.Sleep(3 * time.Second) // a measurement window of 3 intervals, not a synchronization
	var ofA []*sourceTarget
	for _, st := range ts {
		h := st.take()
		us := h[usA] + h[usB]
		// 3 intervals: 2 to 4 rounds; one probe per round from us-east1 (every replica of the
		// region probing would give 4 to 8), and from one replica only.
		if us < 2 || us > 4 || (h[usA] > 0 && h[usB] > 0) {
			t.Errorf("target %s: us-east1 probes %v, want 2..4 from one replica", st.addr, h)
		}
		if h[eu] < 2 || h[eu] > 4 {
			t.Errorf("target %s: %d europe-west1 probes in 3 intervals, want 2..4", st.addr, h[eu])
		}
		if h[usA] > 0 {
			ofA = append(ofA, st)
		}
	}
	if len(ofA) == 0 || len(ofA) == len(ts) {
		t.Fatalf("a probes %d of %d targets: rendezvous hashing should split them", len(ofA), len(ts))
	}
	// F-1: a dies; its lease expires and b takes its targets over.
	killed := time.Now()
	a.Kill()
	moved := map[*sourceTarget]bool{}
	deadline := killed.Add(leaseTTL(fleetTimeout) + 3*time.Second) // the lease, then at most 3 intervals
	for len(moved) < len(ofA) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of a's %d targets probed by b %.1fs after a died, want all within the lease TTL and the next round", len(moved), len(ofA), time.Since(killed).Seconds())
		}
		time.Sleep(50 * time.Millisecond)
		for _, st := range ofA {
			if st.take()[usB] > 0 {
				moved[st] = true
			}
		}
	}
	t.Logf("a's %d targets probed by b %.1fs after a was killed (lease TTL %s)", len(ofA), time.Since(killed).Seconds(), leaseTTL(fleetTimeout))
	waitFor30(t, "b probes all of us-east1's targets", func() bool { return probed(b) == 8 })
	if n := b.Metric(`coredns_healthcheck_fleet_members{replica="b"}`); n != 2 {
		t.Errorf("b sees %v members after a died, want 2", n)
	}
	if !strings.Contains(b.logs.String(), "2 members: b (us-east1), c (europe-west1)") {
		t.Errorf("b did not log the fleet view without a:\n%s", b.logs)
	}
}

// F-1, F-2: with a 5 s interval, the targets of a replica that dies are probed by the other
// replica of its region within half a second of the dead one's lease expiring, not at their next
// round up to an interval later: a change of the members brings the rounds that moved forward.
func TestFleetTakeoverF1F2(t *testing.T) {
	etcd := etcdtest.New(t)
	// 24 targets, about 12 of them a's: without the rounds brought forward, each would have its
	// next round within 2.5 s of the expiry with a chance of 1 in 2, all of them about once in
	// 4,000 runs.
	ips := make([]string, 0, 24)
	for i := range 24 {
		ips = append(ips, fmt.Sprintf("127.0.84.%d", i+1))
	}
	ts := sourceTargets(t, ips...)
	const usA, usB = "127.0.90.31", "127.0.90.32"
	for _, st := range ts {
		st.allow(usA, usB)
	}
	cf := fleetCorefile(etcd.Endpoint, "/test/takeover", ts[0].addr.Port(), strings.Join(ips, ","), 1, 1, 5*time.Second)
	a := startReplicaProc(t, "a", cf, "REGION=us-east1", "SOURCE="+usA)
	b := startReplicaProc(t, "b", cf, "REGION=us-east1", "SOURCE="+usB)
	probed := func(rp *replicaProc) float64 {
		return rp.Metric(`coredns_healthcheck_fleet_targets_probed{replica="` + rp.Name + `"}`)
	}
	waitFor30(t, "the targets split between a and b", func() bool {
		pa, pb := probed(a), probed(b)
		return deciding(a, b) && pa > 0 && pb > 0 && pa+pb == 24
	})
	// a's targets: those b has not probed for an interval.
	for _, st := range ts {
		st.take()
	}
	time.Sleep(5*time.Second + 500*time.Millisecond) // one interval, to see who probes what
	var ofA []*sourceTarget
	for _, st := range ts {
		if h := st.take(); h[usA] > 0 && h[usB] == 0 {
			ofA = append(ofA, st)
		}
	}
	if len(ofA) == 0 {
		t.Fatal("a probes no target alone")
	}
	killed := time.Now()
	a.Kill()
	moved := map[*sourceTarget]bool{}
	// The lease (at most the lease TTL after a's last renewal), the watch, then rounds spread over half
	// a second; a target's next round without that could be up to 5 s later.
	deadline := killed.Add(leaseTTL(fleetTimeout) + 2500*time.Millisecond)
	for len(moved) < len(ofA) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of a's %d targets probed by b %.1fs after a died, want all within the lease TTL (%s) and 2.5 s", len(moved), len(ofA), time.Since(killed).Seconds(), leaseTTL(fleetTimeout))
		}
		time.Sleep(20 * time.Millisecond)
		for _, st := range ofA {
			if st.take()[usB] > 0 {
				moved[st] = true
			}
		}
	}
	t.Logf("a's %d targets probed by b %.1fs after a was killed (interval 5s, lease TTL %s)", len(ofA), time.Since(killed).Seconds(), leaseTTL(fleetTimeout))
}
