package pschealth

import (
	"fmt"

	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// Policy is an aggregation policy (P-1): a backend service is healthy only when at least
// MinPercent percent of its backends and at least MinCount backends are healthy.
type Policy struct {
	Name       string
	MinPercent int // 0..100
	MinCount   int // >= 0
}

// The built-in policy used by a source without a policy line (P-1 defaults).
const (
	defaultPolicyName = "default"
	defaultMinPercent = 60
	defaultMinCount   = 1
)

// DefaultPolicy returns the built-in policy: 60 % and 1 backend.
func DefaultPolicy() Policy {
	return Policy{Name: defaultPolicyName, MinPercent: defaultMinPercent, MinCount: defaultMinCount}
}

// Tally counts the backends of a source by state.
type Tally struct {
	Healthy, Unhealthy, Unknown int
}

// Add counts one backend in state s.
func (t *Tally) Add(s health.State) {
	switch s {
	case health.Healthy:
		t.Healthy++
	case health.Unhealthy:
		t.Unhealthy++
	default:
		t.Unknown++
	}
}

// Total is the number of backends counted.
func (t Tally) Total() int { return t.Healthy + t.Unhealthy + t.Unknown }

// Percent is the share of healthy backends, 0..100, rounded down; 0 when there are none.
func (t Tally) Percent() int {
	if t.Total() == 0 {
		return 0
	}
	return t.Healthy * 100 / t.Total()
}

// meets reports whether healthy of total backends satisfy both minimums. Integer arithmetic:
// 3 of 5 is exactly 60 %, with no float rounding at the boundary. With no backends at all the
// percentage is vacuously met and the count decides.
func (p Policy) meets(healthy, total int) bool {
	return healthy >= p.MinCount && healthy*100 >= p.MinPercent*total
}

// Evaluate returns the state of a source whose backends are counted in t (P-1).
//
// Backends without a verdict yet (Unknown) are undecided, not healthy and not unhealthy: the
// source is Healthy when the policy is met by the healthy backends alone, Unhealthy when it could
// not be met even if every undecided backend turned out healthy, and Unknown otherwise. Unknown is
// served like Healthy (H-2), so a new service is not failed over before data says so, and a
// service whose verdict is already certain is decided without waiting for the stragglers.
func (p Policy) Evaluate(t Tally) health.State {
	total := t.Total()
	if p.meets(t.Healthy, total) {
		return health.Healthy
	}
	if !p.meets(t.Healthy+t.Unknown, total) {
		return health.Unhealthy
	}
	return health.Unknown
}

// String describes the thresholds, as logs show them.
func (p Policy) String() string {
	return fmt.Sprintf("policy %q (min_healthy_percent %d, min_healthy %d)", p.Name, p.MinPercent, p.MinCount)
}

// Combine returns the state of a composite from the states of its sources (P-3): Unhealthy when
// any source is, Healthy when every source is, Unknown otherwise (no source unhealthy, some
// without a verdict).
func Combine(states []health.State) health.State {
	out := health.Healthy
	for _, s := range states {
		switch s {
		case health.Unhealthy:
			return health.Unhealthy
		case health.Unknown:
			out = health.Unknown
		}
	}
	return out
}
