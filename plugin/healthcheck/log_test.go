package healthcheck

import (
	"strings"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	"github.com/prometheus/client_golang/prometheus"
)

// HC-7: with log on, each state change is one log line naming the check, the target, the old
// and new state and the reason; rounds that change nothing log nothing. Without log, nothing.
func TestStateChangeLogHC7(t *testing.T) {
	for _, on := range []bool{true, false} {
		logs := coretest.CaptureLog(t)
		r, clk, b := testRegistry(t)
		s := newScript()
		r.probe = s.probe
		c := grid(1, 1)
		c.Name, c.Interval, c.HealthyThreshold, c.UnhealthyThreshold, c.Log = "logged", 10*time.Second, 1, 1, on
		run := newCheckRun(c)
		bt := b.Acquire(health.Key{Check: c.Name, Addr: tgt.Addr()})
		p := r.acquire(run, tgt)
		r.attach(p, bt)
		waitRounds(t, r, 1)
		clk.Advance(10 * time.Second)
		waitRounds(t, r, 2) // no change
		s.set(tgt, failure)
		clk.Advance(10 * time.Second)
		waitRounds(t, r, 3)
		r.detach(p, bt)
		r.release(p, run)
		// HC-7: state changes are logged whether log is on or not; log adds every failed round.
		lines := strings.Count(logs.String(), "plugin/healthcheck: Check logged target 127.0.0.1:80: ") -
			strings.Count(logs.String(), "probe round failed")
		if lines != 2 {
			t.Fatalf("log %v: %d state-change lines, want 2:\n%s", on, lines, logs)
		}
		failed := strings.Count(logs.String(), "Check logged target 127.0.0.1:80: probe round failed: 0/1 regions healthy")
		if want := map[bool]int{true: 1, false: 0}[on]; failed != want {
			t.Fatalf("log %v: %d failed-round lines, want %d:\n%s", on, failed, want, logs)
		}
		for _, want := range []string{
			"Check logged target 127.0.0.1:80: unknown -> healthy (1/1 regions healthy)",
			"Check logged target 127.0.0.1:80: healthy -> unhealthy (1 consecutive failures: 0/1 regions healthy (us-east1: scripted unhealthy))",
		} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("missing %q in:\n%s", want, logs)
			}
		}
	}
}

// The state gauge has one series per configured (check, target); a released target's series is
// deleted, so the label set stays bounded by the configuration.
func TestStateSeriesDeleted(t *testing.T) {
	r, _, b := testRegistry(t)
	r.probe = newScript().probe
	c := grid(1, 1)
	c.Name = "series"
	run := newCheckRun(c)
	bt := b.Acquire(health.Key{Check: c.Name, Addr: tgt.Addr()})
	p := r.acquire(run, tgt)
	r.attach(p, bt)
	waitRounds(t, r, 1)
	if v, ok := stateSeries(t, "series", "127.0.0.1:80"); !ok || v != 1 {
		t.Fatalf("state series %v %v, want 1 (healthy)", v, ok)
	}
	r.detach(p, bt)
	r.release(p, run)
	if _, ok := stateSeries(t, "series", "127.0.0.1:80"); ok {
		t.Fatal("series of a released target still exported")
	}
}

func stateSeries(t *testing.T, check, target string) (float64, bool) {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "coredns_healthcheck_target_state" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["check"] == check && l["target"] == target {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}
