package pschealth

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// P-6 (issue 11, item 5): a dry-run composite has no effect on consumers, so it does not hold
// readiness back; a published one does until it has a verdict.
func TestDryRunDoesNotHoldReadinessP6(t *testing.T) {
	b := health.NewBoard(time.Now)
	newBackends(t, b) // no verdict yet
	if p := start(t, config(t, "dry_run"), b); !p.Ready() {
		t.Error("a dry-run block without verdicts holds readiness back")
	}
	if p := start(t, config(t, ""), health.NewBoard(time.Now)); p.Ready() {
		t.Error("a published composite without a verdict is ready")
	}
}

// policyConfig is one composite over web-a whose policy asks for percent and count healthy
// backends; extra lines (dry_run) go at the end of the block.
func policyConfig(t *testing.T, percent, count int, dest string, extra ...string) *Config {
	t.Helper()
	cf := fmt.Sprintf(`pschealth {
	policy p min_healthy_percent %d min_healthy %d
	source web-a {
		backends 127.0.1.1 127.0.1.2 127.0.1.3
		check web
		policy p
	}
	composite svc-a {
		sources web-a
		destination %s
	}
	%s
}`, percent, count, dest, strings.Join(extra, "\n\t"))
	cfg, err := parse(caddy.NewTestController("dns", cf), testChecks)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// H-6 and P-1 (issue 11, item 5): during a reload the old and the new instance both compute the
// composite; the new Corefile's policy is the one whose result stands, whatever order their
// computations finish in. When the new instance goes first (a failed reload abandoned), the old
// one's result is written again.
func TestNewestInstanceWritesH6(t *testing.T) {
	coretest.CaptureLog(t)
	b := health.NewBoard(time.Now)
	bs := newBackends(t, b)
	dest := consumer(t, b, "127.0.9.1")
	old := New(policyConfig(t, 60, 1, "127.0.9.1"), b)
	if err := old.OnStartup(); err != nil {
		t.Fatal(err)
	}
	defer old.OnShutdown()
	bs.all(health.Healthy)
	bs.set(health.Unhealthy, "web/127.0.1.1") // 2/3: meets 60 %, not 100 %
	settled(t, old)
	eventually(t, "healthy under the old policy", func() bool { return dest.State() == health.Healthy })

	next := New(policyConfig(t, 100, 1, "127.0.9.1"), b)
	if err := next.OnStartup(); err != nil {
		t.Fatal(err)
	}
	if dest.State() != health.Unhealthy {
		t.Fatalf("after the new instance started: %s, want unhealthy (its policy)", dest.State())
	}
	// The old instance computes again while both run (its loop is idle: no change since settled).
	old.evaluate()
	if dest.State() != health.Unhealthy || gauge(t, compositeState, "svc-a", "127.0.9.1", "unhealthy") != 1 || gauge(t, sourceState, "web-a", "unhealthy") != 1 {
		t.Fatalf("the old instance's result was written over the new one's: destination %s, composite unhealthy %v, source unhealthy %v",
			dest.State(), gauge(t, compositeState, "svc-a", "127.0.9.1", "unhealthy"), gauge(t, sourceState, "web-a", "unhealthy"))
	}
	if err := next.OnShutdown(); err != nil { // a failed reload's instance, abandoned
		t.Fatal(err)
	}
	eventually(t, "the old policy's result again", func() bool {
		return dest.State() == health.Healthy && gauge(t, compositeState, "svc-a", "127.0.9.1", "healthy") == 1
	})
}

// H-6 and P-6, the newest-writer rule when the newest instance is abandoned: the survivor writes
// again every series it writes, the thresholds of its sources and whether its composites are
// published included, not only the states: they do not keep the values of a Corefile that never
// served.
func TestAbandonedNewestRestoresTheSurvivorsGaugesH6(t *testing.T) {
	coretest.CaptureLog(t)
	b := health.NewBoard(time.Now)
	newBackends(t, b)
	consumer(t, b, "127.0.9.31")
	old := New(policyConfig(t, 60, 1, "127.0.9.31"), b)
	if err := old.OnStartup(); err != nil {
		t.Fatal(err)
	}
	defer old.OnShutdown()

	// The failed reload's instance: a stricter policy, in dry run.
	next := New(policyConfig(t, 100, 2, "127.0.9.31", "dry_run"), b)
	if err := next.OnStartup(); err != nil {
		t.Fatal(err)
	}
	if pct := gauge(t, sourceMinHealthyPercent, "web-a"); pct != 100 {
		t.Fatalf("min_healthy_percent %v while the new instance runs, want 100", pct)
	}
	if err := next.OnShutdown(); err != nil { // abandoned
		t.Fatal(err)
	}
	eventually(t, "the survivor's thresholds and publication", func() bool {
		return gauge(t, sourceMinHealthyPercent, "web-a") == 60 && gauge(t, sourceMinHealthy, "web-a") == 1 &&
			gauge(t, compositePublished, "svc-a", "127.0.9.31") == 1
	})
}

// H-6 (issue 11, item 6): a composite whose destination a reload changes loses the series under
// the old destination; a composite the reload removes loses all of them.
func TestCompositeSeriesFollowTheConfigurationH6(t *testing.T) {
	coretest.CaptureLog(t)
	b := health.NewBoard(time.Now)
	newBackends(t, b)
	old := New(policyConfig(t, 60, 1, "127.0.9.5"), b)
	if err := old.OnStartup(); err != nil {
		t.Fatal(err)
	}
	next := start(t, policyConfig(t, 60, 1, "127.0.9.6"), b)
	if err := old.OnShutdown(); err != nil {
		t.Fatal(err)
	}
	dests := func() []string {
		var out []string
		for _, m := range []string{"coredns_pschealth_composite_state", "coredns_pschealth_composite_published"} {
			for _, l := range coretest.Series(t, m) {
				if strings.HasPrefix(l["destination"], "127.0.9.") {
					out = append(out, m+"/"+l["destination"])
				}
			}
		}
		return out
	}
	for _, d := range dests() {
		if strings.HasSuffix(d, "/127.0.9.5") {
			t.Errorf("series of the old destination left: %s", d)
		}
	}
	if err := next.OnShutdown(); err != nil {
		t.Fatal(err)
	}
	if got := dests(); len(got) != 0 {
		t.Errorf("series left after shutdown: %v", got)
	}
}
