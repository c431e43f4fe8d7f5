package healthcheck

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/statusview"
)

// S-1: the status view of a probe has each prober region's last result and latency and the
// progress towards the thresholds; keeping the last attempts allocates nothing per round.
func TestStatusPerRegionView(t *testing.T) {
	r, clk, b := testRegistry(t)
	c := grid(2, 1)
	c.Interval = 10 * time.Second
	c.HealthyThreshold, c.UnhealthyThreshold = 2, 3
	run := newCheckRun(c)
	// Region 0 fails, region 1 succeeds: 1/2 regions healthy is not a majority.
	r.probe = func(_ context.Context, _ *checkRun, slot int, _ netip.AddrPort, _ string) attempt {
		if slot == 0 {
			return attempt{outcome: failure, reason: "connection refused"}
		}
		return attempt{outcome: success}
	}
	bt := b.Acquire(health.Key{Check: c.Name, Addr: tgt.Addr()})
	p := r.acquire(run, tgt)
	r.attach(p, bt)
	waitRounds(t, r, 1)

	var v statusview.View
	r.show(c.Name, &v)
	v.Targets = []statusview.Target{{Key: bt.Key().String()}}
	v.Finish()
	pv := v.Targets[0].Probe
	if pv == nil {
		t.Fatalf("no probe view for %s", bt.Key())
	}
	if len(pv.Regions) != 2 || pv.Regions[0].Verdict != "unhealthy" || pv.Regions[1].Verdict != "healthy" {
		t.Fatalf("regions = %+v, want region 0 unhealthy and region 1 healthy", pv.Regions)
	}
	pr := pv.Regions[0].Probers[0]
	if pr.Result != "unhealthy" || pr.Reason != "connection refused" || pr.At.IsZero() || !pv.LastRound.Equal(clk.Now()) {
		t.Fatalf("prober = %+v, last round %v", pr, pv.LastRound)
	}
	if !strings.Contains(pv.Progress, "successes to healthy") || pv.Failures != 1 {
		t.Fatalf("progress %q, failures %d: want the count towards healthy", pv.Progress, pv.Failures)
	}

	// No allocation per round beyond today's: remembering reuses the slots.
	res := make([]attempt, c.slots())
	now := clk.Now()
	for i := range res {
		res[i].at = now
	}
	p.mu.Lock()
	allocs := testing.AllocsPerRun(100, func() { p.remember(res, now) })
	p.mu.Unlock()
	if allocs != 0 {
		t.Fatalf("remember allocates %v per round, want 0", allocs)
	}
	r.detach(p, bt)
	r.release(p, run)
}
