package healthcheck

import (
	"fmt"

	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// verdict is the aggregate of one round: every prober of every region probed the target once.
type verdict struct {
	outcome        outcome // noResult when no region produced a result
	healthyRegions int
	regions        int // regions that produced a result
	reason         string
}

// tally is what the probers of one region saw of a target: how many produced a result, how many
// of those succeeded, and the reason of the first failure. A local round gives one tally per
// region of the check; in a fleet the tallies of one region published by every replica that
// probes it add up (fleetmirror.go), so HC-2 counts every prober of the fleet in that region.
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

// aggregate applies HC-2 to the tallies of a round, the one function for a replica alone and for
// a fleet. A region's verdict is the strict majority of its probers that produced a result (a tie
// is unhealthy); a region whose probers all failed to run abstains. The target is healthy when a
// strict majority of the regions that produced a result say healthy.
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
