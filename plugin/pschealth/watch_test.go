package pschealth

import (
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Two regions' worth of config: composite svc-a over web-a (3 backends, default policy) and
// db-a (2 backends, strict 100 % / 2); svc-b over web-b.
const twoRegions = `pschealth {
	policy strict min_healthy_percent 100 min_healthy 2
	source web-a {
		backends 127.0.1.1 127.0.1.2 127.0.1.3
		check web
	}
	source db-a {
		backends 127.0.1.11:5432 127.0.1.12:5432
		check db
		policy strict
	}
	source web-b {
		backends 127.0.2.1 127.0.2.2
		check web
	}
	composite svc-a {
		sources web-a db-a
		destination 127.0.9.1
	}
	composite svc-b {
		sources web-b
		destination 127.0.9.2
	}
	%s
}`

func config(t *testing.T, extra string) *Config {
	t.Helper()
	cfg, err := parse(caddy.NewTestController("dns", strings.Replace(twoRegions, "%s", extra, 1)), testChecks)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// backends plays healthcheck: it holds and publishes the backend targets and sets their state.
type backends struct {
	b  *health.Board
	ts map[string]*health.Target
}

func newBackends(t *testing.T, b *health.Board) *backends {
	t.Helper()
	bs := &backends{b: b, ts: map[string]*health.Target{}}
	for _, k := range []string{"web/127.0.1.1", "web/127.0.1.2", "web/127.0.1.3", "db/127.0.1.11:5432", "db/127.0.1.12:5432", "web/127.0.2.1", "web/127.0.2.2"} {
		check, addr, _ := strings.Cut(k, "/")
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			ap = netip.AddrPortFrom(netip.MustParseAddr(addr), 0)
		}
		tg := b.Acquire(health.Key{Check: check, Addr: ap.Addr(), Port: ap.Port()})
		b.Publish(tg)
		bs.ts[k] = tg
	}
	t.Cleanup(func() {
		for _, tg := range bs.ts {
			b.Unpublish(tg)
			b.Release(tg)
		}
	})
	return bs
}

func (bs *backends) set(s health.State, keys ...string) {
	for _, k := range keys {
		bs.b.Set(bs.ts[k], s, "test")
	}
}

func (bs *backends) all(s health.State) {
	for k := range bs.ts {
		bs.set(s, k)
	}
}

// consumer plays routingpolicy: it holds the destination like any unchecked address.
func consumer(t *testing.T, b *health.Board, dest string) *health.Target {
	t.Helper()
	tg := b.Acquire(health.Key{Addr: netip.MustParseAddr(dest)})
	t.Cleanup(func() { b.Release(tg) })
	return tg
}

// eventually polls cond with a deadline: propagation is asynchronous (one hop to the loop).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// settled waits until p has evaluated every backend change notified so far.
func settled(t *testing.T, p *PSCHealth) {
	t.Helper()
	n := p.seen.Load()
	eventually(t, "evaluation", func() bool { return p.evaluated.Load() >= n })
}

func start(t *testing.T, cfg *Config, b *health.Board) *PSCHealth {
	t.Helper()
	p := New(cfg, b)
	if err := p.OnStartup(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.OnShutdown() })
	return p
}

func gauge(t *testing.T, vec *prometheus.GaugeVec, labels ...string) float64 {
	t.Helper()
	m := &dto.Metric{}
	if err := vec.WithLabelValues(labels...).Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// P-1..P-4: sources follow their policies, a composite is healthy only when all its sources are,
// and its state is published under the destination, where a consumer sees it. Changes of
// backend state propagate without any query or timer: pschealth has no poll loop, only the
// board subscription, so the polling below only waits for the subscriber's hop.
func TestCompositePublishedAndPropagated(t *testing.T) {
	logs := coretest.CaptureLog(t)
	b := health.NewBoard(time.Now)
	bs := newBackends(t, b)
	destA, destB := consumer(t, b, "127.0.9.1"), consumer(t, b, "127.0.9.2")
	if destA.Checked() {
		t.Fatal("destination checked before pschealth started")
	}
	p := start(t, config(t, ""), b)

	// P-4: published; H-2: unknown until the backends have verdicts, and served meanwhile.
	if !destA.Checked() || !destB.Checked() {
		t.Fatal("destinations not published")
	}
	if destA.State() != health.Unknown || !destA.Healthy() || p.Ready() {
		t.Fatalf("before any verdict: state %s ready %v, want unknown and not ready", destA.State(), p.Ready())
	}

	bs.all(health.Healthy)
	eventually(t, "svc-a healthy", func() bool { return destA.State() == health.Healthy && destB.State() == health.Healthy })
	eventually(t, "ready", p.Ready)

	// P-1 via P-3: web-a 2/3 = 66 % still meets 60 %; db-a (strict 100 %) loses one: svc-a fails.
	bs.set(health.Unhealthy, "web/127.0.1.1")
	settled(t, p)
	if destA.State() != health.Healthy {
		t.Fatalf("web-a at 66 %% should keep svc-a healthy, got %s", destA.State())
	}
	bs.set(health.Unhealthy, "db/127.0.1.11:5432")
	eventually(t, "svc-a unhealthy", func() bool { return destA.State() == health.Unhealthy })
	settled(t, p) // the board is set first; the log line and the gauges follow
	if destB.State() != health.Healthy {
		t.Errorf("svc-b must not follow svc-a: %s", destB.State())
	}
	// P-6: one line naming the failing source and its thresholds, not the healthy one.
	lines := logs.Lines(`"svc-a" (destination`)
	last := lines[len(lines)-1]
	for _, want := range []string{"is unhealthy, was healthy", `source "db-a" 1/2 backends healthy (50%)`, `below policy "strict" (min_healthy_percent 100, min_healthy 2)`} {
		if !strings.Contains(last, want) {
			t.Errorf("log line %q lacks %q", last, want)
		}
	}
	if strings.Contains(last, `"web-a"`) {
		t.Errorf("log line blames web-a, which meets its policy: %q", last)
	}
	if st := destA.Status(); !strings.Contains(st.Reason, `"db-a"`) {
		t.Errorf("board reason = %q, want the failing source", st.Reason)
	}

	// Repair: back to healthy, with one more line.
	bs.set(health.Healthy, "db/127.0.1.11:5432")
	eventually(t, "svc-a healthy again", func() bool { return destA.State() == health.Healthy })
	settled(t, p) // the board is set first; the log line and the gauges follow
	if n := len(logs.Lines(`"svc-a" (destination`)); n != 3 {
		t.Errorf("svc-a logged %d lines, want 3 (healthy, unhealthy, healthy): %q", n, logs.Lines(`"svc-a" (destination`))
	}

	// web-a down to 1/3 = 33 %: below 60 %.
	bs.set(health.Unhealthy, "web/127.0.1.2")
	eventually(t, "svc-a unhealthy by web-a", func() bool { return destA.State() == health.Unhealthy })
	settled(t, p) // the board is set first; the log line and the gauges follow
	if last := logs.Lines(`"svc-a" (destination`); !strings.Contains(last[len(last)-1], `source "web-a" 1/3 backends healthy (33%), below policy "default" (min_healthy_percent 60, min_healthy 1)`) {
		t.Errorf("log = %q", last[len(last)-1])
	}

	// P-6 metrics: state per composite and per source, backend counts against the minimums.
	if v := gauge(t, compositeState, "svc-a", "127.0.9.1", "unhealthy"); v != 1 {
		t.Errorf("composite_state{svc-a,unhealthy} = %v", v)
	}
	if v := gauge(t, compositeState, "svc-a", "127.0.9.1", "healthy"); v != 0 {
		t.Errorf("composite_state{svc-a,healthy} = %v", v)
	}
	if v := gauge(t, compositePublished, "svc-a", "127.0.9.1"); v != 1 {
		t.Errorf("composite_published = %v", v)
	}
	if v := gauge(t, sourceState, "web-a", "unhealthy"); v != 1 {
		t.Errorf("source_state{web-a,unhealthy} = %v", v)
	}
	if v := gauge(t, sourceBackends, "web-a", "healthy"); v != 1 {
		t.Errorf("source_backends{web-a,healthy} = %v", v)
	}
	if v := gauge(t, sourceBackends, "web-a", "unhealthy"); v != 2 {
		t.Errorf("source_backends{web-a,unhealthy} = %v", v)
	}
	if v := gauge(t, sourceMinHealthy, "db-a"); v != 2 {
		t.Errorf("source_min_healthy{db-a} = %v", v)
	}
	if v := gauge(t, sourceMinHealthyPercent, "db-a"); v != 100 {
		t.Errorf("source_min_healthy_percent{db-a} = %v", v)
	}
}

// P-6: dry_run computes, logs and exports, but publishes nothing: consumers are unaffected.
func TestDryRun(t *testing.T) {
	logs := coretest.CaptureLog(t)
	b := health.NewBoard(time.Now)
	bs := newBackends(t, b)
	destA := consumer(t, b, "127.0.9.1")
	p := start(t, config(t, "dry_run"), b)

	bs.all(health.Healthy)
	eventually(t, "dry-run healthy", func() bool { return gauge(t, compositeState, "svc-a", "127.0.9.1", "healthy") == 1 })
	eventually(t, "ready", p.Ready)
	bs.set(health.Unhealthy, "web/127.0.1.1", "web/127.0.1.2", "web/127.0.1.3")
	eventually(t, "dry-run unhealthy", func() bool { return gauge(t, compositeState, "svc-a", "127.0.9.1", "unhealthy") == 1 })

	if destA.Checked() || destA.State() != health.Unknown || !destA.Healthy() {
		t.Errorf("dry run touched the destination: checked %v state %s", destA.Checked(), destA.State())
	}
	if v := gauge(t, compositePublished, "svc-a", "127.0.9.1"); v != 0 {
		t.Errorf("composite_published = %v in dry run", v)
	}
	eventually(t, "dry-run log", func() bool { return len(logs.Lines(`would be unhealthy`)) == 1 })
	l := logs.Lines(`would be unhealthy`)[0]
	// The three backends go down one by one: the evaluation that turns svc-a unhealthy can come
	// after the second (1/3, 33 %) or the third (0/3).
	if want := `Dry run: composite "svc-a" (destination 127.0.9.1) would be unhealthy, was healthy (not published)`; !strings.Contains(l, want) {
		t.Errorf("log line %q lacks %q", l, want)
	}
	if want := regexp.MustCompile(`source "web-a" (0/3 backends healthy \(0%\)|1/3 backends healthy \(33%\)), below policy "default"`); !want.MatchString(l) {
		t.Errorf("log line %q does not match %s", l, want)
	}
}

// H-4: a reload (new instance starts, then the old one stops) keeps the composite state: same
// verdict, same time of change, no new log line, still published; the new instance carries on.
func TestReloadKeepsState(t *testing.T) {
	for _, dry := range []bool{false, true} {
		t.Run(map[bool]string{false: "published", true: "dry_run"}[dry], func(t *testing.T) {
			logs := coretest.CaptureLog(t)
			b := health.NewBoard(time.Now)
			bs := newBackends(t, b)
			destA := consumer(t, b, "127.0.9.1")
			extra := ""
			if dry {
				extra = "dry_run"
			}
			old := New(config(t, extra), b)
			if err := old.OnStartup(); err != nil {
				t.Fatal(err)
			}
			bs.all(health.Healthy)
			bs.set(health.Unhealthy, "db/127.0.1.12:5432")
			eventually(t, "unhealthy", func() bool { return gauge(t, compositeState, "svc-a", "127.0.9.1", "unhealthy") == 1 })
			before := destA.Status()
			nlines := len(logs.Lines(`"svc-a" (destination`))

			next := start(t, config(t, extra), b)
			if err := old.OnShutdown(); err != nil {
				t.Fatal(err)
			}
			if got := destA.Status(); got != before {
				t.Errorf("reload changed the destination: %+v -> %+v", before, got)
			}
			if destA.Checked() == dry {
				t.Errorf("after reload checked = %v", destA.Checked())
			}
			if n := len(logs.Lines(`"svc-a" (destination`)); n != nlines {
				t.Errorf("reload logged %d new lines: %q", n-nlines, logs.Lines(`"svc-a" (destination`))
			}
			// Metrics series survive the old instance's shutdown.
			if v := gauge(t, compositeState, "svc-a", "127.0.9.1", "unhealthy"); v != 1 {
				t.Errorf("metric lost at reload: %v", v)
			}
			if !next.Ready() {
				t.Error("new instance not ready although every composite has a verdict")
			}
			// The new instance propagates.
			bs.set(health.Healthy, "db/127.0.1.12:5432")
			eventually(t, "healthy after reload", func() bool { return gauge(t, compositeState, "svc-a", "127.0.9.1", "healthy") == 1 })
			if !dry && destA.State() != health.Healthy {
				t.Errorf("destination %s after repair", destA.State())
			}
		})
	}
}

// H-4, second half: a composite no longer configured stops being published at once, and a
// consumer still holding the address serves it again (Unknown, H-2), not a stale Unhealthy.
func TestRemovedCompositeIsUnpublished(t *testing.T) {
	coretest.CaptureLog(t)
	b := health.NewBoard(time.Now)
	bs := newBackends(t, b)
	destA := consumer(t, b, "127.0.9.1")
	p := New(config(t, ""), b)
	probed := serve(t, p.demand, "web", "db")
	if err := p.OnStartup(); err != nil {
		t.Fatal(err)
	}
	if len(probed) != 7 {
		t.Fatalf("%d backends probed, want 7", len(probed))
	}
	bs.all(health.Unhealthy)
	eventually(t, "unhealthy", func() bool { return destA.State() == health.Unhealthy })
	if err := p.OnShutdown(); err != nil {
		t.Fatal(err)
	}
	if destA.Checked() || !destA.Healthy() {
		t.Errorf("after shutdown: checked %v state %s", destA.Checked(), destA.State())
	}
	if len(probed) != 0 {
		t.Errorf("backends still wanted after shutdown: %v", probed)
	}
	// The metric series of a composite and a source nobody configures any more are gone.
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "coredns_pschealth_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if v := l.GetValue(); v == "svc-a" || v == "web-a" {
					t.Errorf("%s still has a series for %s", mf.GetName(), v)
				}
			}
		}
	}
	if err := p.OnShutdown(); err != nil { // idempotent
		t.Fatal(err)
	}
}

// A destination that another writer publishes already (a healthcheck loadbalancer VIP) is not
// taken over: an error line, the composite is computed and not published, the VIP keeps its state.
func TestDestinationOwnedByAnotherWriter(t *testing.T) {
	logs := coretest.CaptureLog(t)
	b := health.NewBoard(time.Now)
	bs := newBackends(t, b)
	vip := b.Acquire(health.Key{Addr: netip.MustParseAddr("127.0.9.1")})
	b.Publish(vip)
	b.Set(vip, health.Healthy, "loadbalancer")
	defer func() { b.Unpublish(vip); b.Release(vip) }()

	start(t, config(t, ""), b)
	if l := logs.Lines("already published by another writer"); len(l) != 1 || !strings.Contains(l[0], `Destination 127.0.9.1 of composite "svc-a"`) {
		t.Errorf("conflict log = %q", l)
	}
	bs.all(health.Unhealthy)
	eventually(t, "computed", func() bool { return gauge(t, compositeState, "svc-a", "127.0.9.1", "unhealthy") == 1 })
	if vip.State() != health.Healthy {
		t.Errorf("VIP state overwritten: %s", vip.State())
	}
	if v := gauge(t, compositePublished, "svc-a", "127.0.9.1"); v != 0 {
		t.Errorf("composite_published = %v", v)
	}
}

// H-6: startup twice, shutdown twice and a shutdown without startup leave nothing behind: no want,
// no publication, no board reference (of the backends and destinations nobody else holds).
func TestStartupIsIdempotentAndShutdownWithoutStartup(t *testing.T) {
	b := health.NewBoard(time.Now)
	dest := consumer(t, b, "127.0.9.1")
	cfg := config(t, "")
	p := New(cfg, b)
	probed := serve(t, p.demand, "web", "db")
	if err := p.OnShutdown(); err != nil {
		t.Fatal(err)
	}
	if err := p.OnStartup(); err != nil {
		t.Fatal(err)
	}
	if err := p.OnStartup(); err != nil {
		t.Fatal(err)
	}
	if err := p.OnShutdown(); err != nil {
		t.Fatal(err)
	}
	if len(probed) != 0 || dest.Checked() {
		t.Errorf("after shutdown: backends wanted %v, destination published %v", probed, dest.Checked())
	}
	keys := []health.Key{cfg.Composites[1].Key()} // svc-b's destination: only pschealth held it
	for _, s := range cfg.Sources {
		keys = append(keys, s.Backends...)
	}
	for _, k := range keys {
		if coretest.Held(b, k) {
			t.Errorf("%v still held on the board after shutdown", k)
		}
	}
}
