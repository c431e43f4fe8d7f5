package healthcheck

import (
	"fmt"
	"sort"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/statusview"
)

// The fleet on the status page (S-1, docs/DESIGN.md section 8): read-only views of a membership,
// taken under its lock from what it already holds; nothing here asks etcd or changes the fleet.

// show fills the fleet's part of the status page: this replica, the mode and why, the members.
// perRegion is the block's replicas_per_region.
func (f *fleet) show(v *statusview.Fleet, perRegion int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	now := f.now()
	v.Enabled = true
	v.Self = f.cfg.Replica
	v.Prefix = f.cfg.Prefix
	v.ReplicasPerRegion = perRegion
	v.Heard = f.heard
	v.Mode = "shared"
	if v.Why = f.why(f.warm(), now); v.Why != "" {
		v.Mode = "fallback"
	}
	alive := f.joined && f.stale(now) == ""
	names := make([]string, 0, len(f.mirror.members))
	for n := range f.mirror.members {
		names = append(names, n)
	}
	sort.Strings(names)
	v.Members = make([]statusview.FleetMember, 0, len(names))
	for _, n := range names {
		v.Members = append(v.Members, statusview.FleetMember{Name: n, Regions: f.mirror.regions(n), LeaseAlive: alive, Self: n == f.cfg.Replica})
	}
}

// why says why a check of interval iv is not decided by the fleet at now, "" when it is: the
// conditions of mode, in words (F-4). f.mu is held.
func (f *fleet) why(iv time.Duration, now time.Time) string {
	switch {
	case !f.joined && f.lastErr != nil:
		return "not joined: " + f.lastErr.Error()
	case !f.joined:
		return "not joined yet"
	case f.dup:
		return fmt.Sprintf("replica name %q is registered by another live process", f.cfg.Replica)
	case f.superseded.Load():
		return "superseded by a newer membership of this process"
	}
	if s := f.stale(now); s != "" {
		return s
	}
	if d := now.Sub(f.heard); d > 3*iv {
		return "etcd's watch not current for " + seconds(d) + ", more than 3 intervals"
	}
	if d := now.Sub(f.since); d < iv {
		return "warming up: the view is current since " + seconds(d) + "; the fleet decides after one interval (" + iv.String() + "), once every member has published"
	}
	return ""
}

// who is who probes target with c from each of its regions (F-2): the members plan chooses,
// whether this replica probed from there in its last round (ran, bit r: region r), and what
// decided the verdict on the board.
func (f *fleet) who(c *Check, target string, perRegion int, ran uint32, shared bool) statusview.FleetProbe {
	out := statusview.FleetProbe{Check: c.Name, Target: target, Verdict: "local"}
	if shared {
		out.Verdict = "fleet"
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	for r, reg := range c.Regions {
		members := f.mirror.probers[proberKey(c.Name, reg.Name)]
		out.Regions = append(out.Regions, statusview.FleetRegion{
			Region:  reg.Name,
			Members: choosers(members, c.Name+"|"+target+"|"+reg.Name, perRegion),
			Here:    ran&(1<<r) != 0,
		})
	}
	return out
}

// states returns what every member published of pair (F-3), in the order the verdict counts
// them, and the fleet's verdict over those that count (HC-2, as decideShared computes it).
func (f *fleet) states(pair pairKey) ([]statusview.SharedState, verdict) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	ss := f.mirror.results[pair]
	out := make([]statusview.SharedState, 0, len(ss))
	for _, s := range ss {
		out = append(out, statusview.SharedState{Region: s.tally.region, Member: s.member, Healthy: s.tally.ok,
			Decided: s.tally.got, Failure: s.tally.failure, Counts: f.mirror.counts(s, pair.check)})
	}
	return out, aggregate(f.mirror.tallies(pair))
}
