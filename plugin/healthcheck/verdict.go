package healthcheck

import (
	"fmt"
	"slices"

	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// verdict is the aggregate of one round: every prober of every region probed the target once.
type verdict struct {
	outcome        outcome // noResult when no region produced a result
	healthyRegions int
	regions        int // regions that produced a result
	reason         string
}

// tally is what the probers of one region say of a target: how many have something to say, how
// many of those say healthy, and the reason of the first that does not. A local round gives one
// tally per region of the check from the probers' results. In a fleet each prober's state (the
// thresholds applied to its own results, proberRound) is published, and the tallies of one
// region published by every replica that probes it add up (fleetmirror.go), so HC-2 counts every
// prober of the fleet in that region.
type tally struct {
	region  string
	ok, got int
	failure string // the first failure's reason, "" when none failed
}

// add counts one attempt.
func (t *tally) add(a attempt) {
	switch a.outcome {
	case success:
		t.ok++
		t.got++
	case failure:
		t.got++
		if t.failure == "" {
			t.failure = a.reason
		}
	}
}

// tallies turns the attempts of a local round, laid out region by region (c.ProbersPerRegion
// per region), into one tally per region that ran (bit r of ran: region r).
func tallies(c *Check, res []attempt, ran uint32) []tally {
	n := c.ProbersPerRegion
	out := make([]tally, 0, len(c.Regions))
	for r := range c.Regions {
		if ran&(1<<r) == 0 {
			continue
		}
		t := tally{region: c.Regions[r].Name}
		for _, a := range res[r*n : (r+1)*n] {
			t.add(a)
		}
		out = append(out, t)
	}
	return out
}

// aggregate applies HC-2 to tallies, the one function for a replica alone (a round's results)
// and for a fleet (its probers' states). A region's verdict is the strict majority of its probers
// that have something to say (a tie is unhealthy); a region with none abstains. The target is
// healthy when a strict majority of the regions that have something to say say healthy.
func aggregate(ts []tally) verdict {
	var v verdict
	firstFailure := ""
	for _, t := range ts {
		if t.got == 0 {
			continue
		}
		if firstFailure == "" && t.failure != "" {
			firstFailure = t.region + ": " + t.failure
		}
		v.regions++
		if 2*t.ok > t.got {
			v.healthyRegions++
		}
	}
	switch {
	case v.regions == 0:
		v.outcome = noResult
		v.reason = "no prober produced a result"
	case 2*v.healthyRegions > v.regions:
		v.outcome = success
		v.reason = fmt.Sprintf("%d/%d regions healthy", v.healthyRegions, v.regions)
	default:
		v.outcome = failure
		v.reason = fmt.Sprintf("%d/%d regions healthy", v.healthyRegions, v.regions)
		if firstFailure != "" {
			v.reason += " (" + firstFailure + ")"
		}
	}
	return v
}

// regionVerdict is the verdict of one region from the attempts of its probers (HC-2), for the
// status page: the strict majority of those that produced a result (a tie is a failure), noResult
// when none did (HC-3). It counts as aggregate does.
func regionVerdict(res []attempt) outcome {
	var t tally
	for _, a := range res {
		t.add(a)
	}
	switch {
	case t.got == 0:
		return noResult
	case 2*t.ok > t.got:
		return success
	}
	return failure
}

// streak is the threshold state of one target: its state and consecutive aggregated results.
type streak struct {
	state     health.State
	successes int
	failures  int
}

// next feeds one verdict into s and returns the new state. The first verdict decides a target
// in state Unknown at once, so a fresh server is ready after one round; after that a change
// needs healthy_threshold consecutive successes or unhealthy_threshold consecutive failures.
// A round with no result (HC-3) changes nothing.
func (s *streak) next(c *Check, o outcome) health.State {
	switch o {
	case success:
		s.successes++
		s.failures = 0
	case failure:
		s.failures++
		s.successes = 0
	default:
		return s.state
	}
	switch {
	case s.state == health.Unknown && o == success:
		s.state = health.Healthy
	case s.state == health.Unknown && o == failure:
		s.state = health.Unhealthy
	case s.state == health.Unhealthy && s.successes >= c.HealthyThreshold:
		s.state = health.Healthy
	case s.state == health.Healthy && s.failures >= c.UnhealthyThreshold:
		s.state = health.Unhealthy
	}
	return s.state
}

// proberState is one prober's own state in a fleet (F-3): the thresholds applied to its results
// alone, and why it is in that state (the failure that made it unhealthy).
type proberState struct {
	streak streak
	reason string
}

// proberRound feeds a round into the states of p's probers (one per slot, region-major) and
// returns one tally per region that ran: how many of its probers are healthy, how many have a
// state, and the reason of the first unhealthy one. These change only when a prober's state
// changes, so they are what a fleet member publishes. A region that did not run forgets its
// probers' states: this replica no longer probes from it. p.mu is held.
func (p *probe) proberRound(c *Check, res []attempt, ran uint32) []tally {
	if len(p.probers) != c.slots() {
		p.probers = make([]proberState, c.slots())
	}
	n := c.ProbersPerRegion
	out := make([]tally, 0, len(c.Regions))
	for r := range c.Regions {
		ps := p.probers[r*n : (r+1)*n]
		if ran&(1<<r) == 0 {
			clear(ps)
			continue
		}
		t := tally{region: c.Regions[r].Name}
		for i := range ps {
			a := res[r*n+i]
			if old := ps[i].streak.state; ps[i].streak.next(c, a.outcome) != old {
				ps[i].reason = a.reason
			}
			switch ps[i].streak.state {
			case health.Healthy:
				t.ok++
				t.got++
			case health.Unhealthy:
				t.got++
				if t.failure == "" {
					t.failure = ps[i].reason
				}
			}
		}
		out = append(out, t)
	}
	return out
}

// keepProbers carries the probers' states over a reload that changed the probe (H-4): their
// states stay and their consecutive-result counters restart, as the target's do, when the
// probers are the same regions in the same order; otherwise they start again. p.mu is held.
func (p *probe) keepProbers(old, c *Check) {
	same := old.ProbersPerRegion == c.ProbersPerRegion && slices.EqualFunc(old.Regions, c.Regions, func(a, b Region) bool { return a.Name == b.Name })
	if !same {
		p.probers = nil
		return
	}
	for i := range p.probers {
		p.probers[i].streak.successes, p.probers[i].streak.failures = 0, 0
	}
}
