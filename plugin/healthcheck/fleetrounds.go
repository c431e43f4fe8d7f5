package healthcheck

import (
	"container/heap"
	"net/netip"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// The registry's side of a fleet (docs/DESIGN.md section 8): which rounds a change of the members
// brings forward, and the verdicts a change of the fleet's results makes.

// replan brings forward the next round of every probe of fleet f that this replica is now chosen
// to probe from a region its last round did not probe from: the fleet's members changed (F-2). A
// replica that takes over the targets of one that died probes them within about a second of the
// member's lease expiring, not at their next round an interval later. The rounds brought forward
// are spread over up to half a second (HC-5).
func (r *Registry) replan(f *fleet) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	moved := false
	for _, p := range r.probes {
		fr := p.run.fleet
		if fr == nil || fr.f != f || p.busy {
			continue
		}
		c := p.run.check
		chosen, _, shared := f.plan(c, p.key.target.String(), fr.perRegion)
		if !shared || chosen&^p.ran == 0 {
			continue
		}
		if soon := now.Add(r.jitter(min(c.Interval, 500*time.Millisecond))); p.due.After(soon) {
			p.due = soon
			heap.Fix(&r.queue, p.index)
			moved = true
		}
	}
	if moved {
		r.kick()
	}
}

// probing counts p in the fleet's gauge of probed targets while its rounds probe; r.mu is held.
func (r *Registry) probing(p *probe, f *fleet, on bool) {
	switch {
	case on && p.probing == nil:
		p.probing = f.gTargets
		p.probing.Inc()
	case !on && p.probing != nil:
		p.probing.Dec()
		p.probing = nil
	}
}

// refresh decides again, from the fleet's results, the probes of f whose (check, target) is
// among pairs, or every probe of f when pairs is nil (the members changed): a change another
// replica published reaches this replica's board within the watch delay, not at its next round,
// so replicas agree at the same moments (F-3).
func (r *Registry) refresh(f *fleet, pairs []pairKey) {
	type job struct {
		p   *probe
		run *checkRun
	}
	var jobs []job
	r.mu.Lock()
	add := func(p *probe) {
		if p != nil && !p.gone && p.run.fleet != nil && p.run.fleet.f == f {
			jobs = append(jobs, job{p: p, run: p.run})
		}
	}
	if pairs == nil {
		for _, p := range r.probes {
			add(p)
		}
	}
	for _, k := range pairs {
		if t, err := netip.ParseAddrPort(k.target); err == nil {
			add(r.probes[probeKey{check: k.check, target: t}])
		}
	}
	r.mu.Unlock()
	for _, j := range jobs {
		r.decideShared(j.p, j.run)
	}
}

// decideShared sets p's verdict from the fleet's results, when the fleet decides its check now
// (F-3): HC-2 over the states of every prober of the fleet that has one, with no threshold of
// this replica's own, so the same keys in etcd give every replica the same verdict and reason.
// When no prober of any member has a state (none published yet, or every one gone with its
// lease), the verdict is Unknown, as for a new target: served (H-2), no failure (HC-3), and the
// same on every replica, rather than whatever each replica decided before (its own verdict, or
// a shared one whose results no longer exist, F-4).
func (r *Registry) decideShared(p *probe, run *checkRun) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r.decideSharedLocked(p, run)
}

// decideSharedLocked is decideShared with p.mu held; it reports whether the fleet decided.
func (r *Registry) decideSharedLocked(p *probe, run *checkRun) bool {
	c := run.check
	pair := pairKey{check: c.Name, target: p.key.target.String()}
	ts, ok := run.fleet.f.shared(pair, c.Interval)
	if !ok {
		return false
	}
	v := aggregate(ts)
	st, reason := health.Healthy, "fleet: "+v.reason
	switch v.outcome {
	case failure:
		st = health.Unhealthy
	case noResult:
		st, reason = health.Unknown, noStateReason
	}
	p.shared = true
	r.set(p, run, st, reason)
	return true
}

// noStateReason is the reason of the fleet's verdict when no prober of any member has a state.
const noStateReason = "fleet: no prober has a state"
