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

// aggregate applies HC-2 to the attempts of one round, laid out region by region
// (c.ProbersPerRegion per region). A region's verdict is the strict majority of its probers that
// produced a result (a tie is unhealthy); a region whose probers all failed to run abstains. The
// target is healthy when a strict majority of the regions that produced a result say healthy.
func aggregate(c *Check, res []attempt) verdict {
	var v verdict
	n := c.ProbersPerRegion
	firstFailure := ""
	for r := range c.Regions {
		rs := res[r*n : (r+1)*n]
		if firstFailure == "" {
			for _, a := range rs {
				if a.outcome == failure {
					firstFailure = c.Regions[r].Name + ": " + a.reason
					break
				}
			}
		}
		switch regionVerdict(rs) {
		case noResult:
			continue
		case success:
			v.healthyRegions++
		}
		v.regions++
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

// regionVerdict is the verdict of one region from the attempts of its probers (HC-2): the strict
// majority of those that produced a result (a tie is a failure), noResult when none did (HC-3).
func regionVerdict(res []attempt) outcome {
	ok, got := 0, 0
	for _, a := range res {
		switch a.outcome {
		case success:
			ok++
			got++
		case failure:
			got++
		}
	}
	switch {
	case got == 0:
		return noResult
	case 2*ok > got:
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
