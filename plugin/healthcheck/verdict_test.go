package healthcheck

import (
	"strings"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/health"
)

func grid(regions, probers int) *Check {
	c := newCheck("web")
	for i := range regions {
		c.Regions = append(c.Regions, Region{Name: []string{"us-east1", "europe-west1", "asia-east1", "us-west1"}[i]})
	}
	c.ProbersPerRegion = probers
	return c
}

// res builds the attempts of a round from a string of h (healthy), u (unhealthy), - (no result).
func res(s string) []attempt {
	var out []attempt
	for _, r := range strings.ReplaceAll(s, " ", "") {
		switch r {
		case 'h':
			out = append(out, attempt{outcome: success})
		case 'u':
			out = append(out, attempt{outcome: failure, reason: "connection refused"})
		default:
			out = append(out, attempt{outcome: noResult, reason: "bind: cannot assign requested address"})
		}
	}
	return out
}

// HC-2: a region's verdict is the strict majority of its probers that produced a result; the
// target is healthy when a strict majority of the regions that produced a result say healthy.
func TestAggregateHC2(t *testing.T) {
	tests := []struct {
		name    string
		regions int
		probers int
		round   string
		want    outcome
		healthy int
		counted int
	}{
		{"3x3 all healthy", 3, 3, "hhh hhh hhh", success, 3, 3},
		// The README's worked example: one region cannot reach the target.
		{"3x3 one region down", 3, 3, "hhh hhh uuu", success, 2, 3},
		{"3x3 two regions down", 3, 3, "hhh uuu uuu", failure, 1, 3},
		// The README's table, line by line.
		{"README: one region down, one prober timing out", 3, 3, "hhh hhu uuu", success, 2, 3},
		{"README: the down region cannot bind instead", 3, 3, "hhh hhu ---", success, 2, 2},
		{"README: a second prober lost", 3, 3, "hhh huu uuu", failure, 1, 3},
		{"3x3 one prober down per region", 3, 3, "hhu hhu hhu", success, 3, 3},
		{"3x3 two probers down per region", 3, 3, "huu huu hhh", failure, 1, 3},
		// HC-3: probers that could not run abstain; the region decides with the others.
		{"3x3 regions with one prober left", 3, 3, "--h --u hhh", success, 2, 3},
		{"3x3 one region cannot run at all", 3, 3, "hhh uuu ---", failure, 1, 2},
		{"3x3 one region cannot run, others healthy", 3, 3, "hhh hhh ---", success, 2, 2},
		{"no prober could run", 3, 3, "--- --- ---", noResult, 0, 0},
		// Ties are not a majority.
		{"2 probers split", 1, 2, "hu", failure, 0, 1},
		{"2 regions split", 2, 1, "h u", failure, 1, 2},
		{"single prober healthy", 1, 1, "h", success, 1, 1},
		{"single prober down", 1, 1, "u", failure, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := grid(tc.regions, tc.probers)
			v := aggregate(tallies(c, res(tc.round), 1<<len(c.Regions)-1))
			if v.outcome != tc.want || v.healthyRegions != tc.healthy || v.regions != tc.counted {
				t.Errorf("got %v %d/%d (%s), want %v %d/%d", v.outcome, v.healthyRegions, v.regions, v.reason, tc.want, tc.healthy, tc.counted)
			}
		})
	}
}

// HC-2 thresholds apply to the aggregated verdict: the first verdict decides an Unknown target,
// then healthy_threshold consecutive successes or unhealthy_threshold failures change the state.
func TestStreakThresholds(t *testing.T) {
	c := newCheck("web")
	c.HealthyThreshold, c.UnhealthyThreshold = 2, 3
	var s streak
	steps := []struct {
		o    outcome
		want health.State
	}{
		{noResult, health.Unknown}, // HC-3: no result decides nothing
		{success, health.Healthy},  // first verdict
		{failure, health.Healthy},
		{failure, health.Healthy},
		{noResult, health.Healthy}, // does not break the streak either
		{failure, health.Unhealthy},
		{success, health.Unhealthy},
		{failure, health.Unhealthy}, // resets the success streak
		{success, health.Unhealthy},
		{success, health.Healthy},
	}
	for i, st := range steps {
		if got := s.next(c, st.o); got != st.want {
			t.Fatalf("step %d (%v): state %v, want %v", i, st.o, got, st.want)
		}
	}
	var u streak
	if got := u.next(c, failure); got != health.Unhealthy {
		t.Fatalf("first failure: %v, want unhealthy", got)
	}
}
