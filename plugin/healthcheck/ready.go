package healthcheck

import (
	"slices"

	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// Ready implements the ready.Readiness interface: the block is ready when every target it probes
// for a consumer that answers from it and every VIP it publishes has had a first verdict (H-2),
// unless ready_wait is off.
func (h *HealthCheck) Ready() bool {
	if !h.cfg.readyWait {
		return true
	}
	run := h.cur.Load()
	if run == nil {
		return false
	}
	if run.ready.Load() {
		return true
	}
	// A target no consumer answers from (only a dry run wants it, P-6) does not count. The
	// Demand is asked without run.mu held: it calls track with its own lock held.
	run.mu.Lock()
	var undecided []health.Key
	for t := range run.bound {
		if !t.Decided() {
			undecided = append(undecided, t.Key())
		}
	}
	run.mu.Unlock()
	if slices.ContainsFunc(undecided, h.demand.Gates) {
		return false
	}
	for _, v := range run.vips {
		if !v.vip.Decided() {
			return false
		}
	}
	// Ready once, ready for good: a target that goes back to Unknown later (a fleet with no
	// prober state for it, F-3) does not take readiness back.
	run.ready.Store(true)
	return true
}
