package pschealth

import (
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// P-1: a backend service is healthy only when both the percent and the count minimums are met.
// Pure arithmetic at the edges.
func TestPolicyEvaluateEdges(t *testing.T) {
	def := DefaultPolicy()
	p3 := Policy{Name: "three", MinPercent: 60, MinCount: 3}
	p0 := Policy{Name: "zero", MinPercent: 60, MinCount: 0}
	pAny := Policy{Name: "any", MinPercent: 0, MinCount: 0}
	pAll := Policy{Name: "all", MinPercent: 100, MinCount: 1}
	h, u := health.Healthy, health.Unhealthy

	tests := []struct {
		name  string
		p     Policy
		tally Tally
		want  health.State
	}{
		// Percent boundary: 59 / 60 / 61 % of 100 backends against the default 60 %.
		{"59 percent", def, Tally{Healthy: 59, Unhealthy: 41}, u},
		{"60 percent", def, Tally{Healthy: 60, Unhealthy: 40}, h},
		{"61 percent", def, Tally{Healthy: 61, Unhealthy: 39}, h},
		// Boundaries that floats get wrong: 3/5 is exactly 60 %, 2/3 is 66.6 %, 179/300 is 59.67 %.
		{"3 of 5 is exactly 60", def, Tally{Healthy: 3, Unhealthy: 2}, h},
		{"2 of 5 is 40", def, Tally{Healthy: 2, Unhealthy: 3}, u},
		{"179 of 300 is below 60", def, Tally{Healthy: 179, Unhealthy: 121}, u},
		{"180 of 300 is 60", def, Tally{Healthy: 180, Unhealthy: 120}, h},
		// Count boundary: exactly at the minimum, one below.
		{"count exactly at minimum", p3, Tally{Healthy: 3, Unhealthy: 2}, h},
		{"count one below minimum", p3, Tally{Healthy: 2, Unhealthy: 1}, u}, // 66 % but only 2
		{"count met percent not", p3, Tally{Healthy: 3, Unhealthy: 3}, u},   // 3 but 50 %
		{"default count exactly 1", Policy{Name: "p", MinPercent: 10, MinCount: 1}, Tally{Healthy: 1, Unhealthy: 9}, h},
		{"default count 0 healthy", Policy{Name: "p", MinPercent: 0, MinCount: 1}, Tally{Unhealthy: 9}, u},
		// Zero backends: the percentage is vacuous, the count decides.
		{"zero backends default", def, Tally{}, u},
		{"zero backends min 0", p0, Tally{}, h},
		{"zero backends any", pAny, Tally{}, h},
		// Extremes.
		{"100 percent all healthy", pAll, Tally{Healthy: 4}, h},
		{"100 percent one down", pAll, Tally{Healthy: 3, Unhealthy: 1}, u},
		{"0 percent 0 count all down", pAny, Tally{Unhealthy: 4}, h},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Evaluate(tc.tally); got != tc.want {
				t.Errorf("%s on %+v = %s, want %s", tc.p, tc.tally, got, tc.want)
			}
		})
	}
}

// H-2 with P-1: a backend without a verdict counts neither way; the source is decided as soon as
// the decided backends settle it, and stays Unknown (served) while they do not.
func TestPolicyEvaluateUnknownBackends(t *testing.T) {
	def := DefaultPolicy()
	tests := []struct {
		name  string
		tally Tally
		want  health.State
	}{
		{"all unknown", Tally{Unknown: 5}, health.Unknown},
		{"enough healthy already", Tally{Healthy: 3, Unknown: 2}, health.Healthy},
		{"cannot reach 60 even if unknown turn healthy", Tally{Healthy: 1, Unhealthy: 3, Unknown: 1}, health.Unhealthy},
		{"depends on the unknown", Tally{Healthy: 2, Unhealthy: 2, Unknown: 1}, health.Unknown},
		{"exactly reachable", Tally{Healthy: 1, Unhealthy: 2, Unknown: 2}, health.Unknown}, // 3/5 = 60 % if both turn healthy
		{"one unknown of one", Tally{Unknown: 1}, health.Unknown},
	}
	for _, tc := range tests {
		if got := def.Evaluate(tc.tally); got != tc.want {
			t.Errorf("%s: Evaluate(%+v) = %s, want %s", tc.name, tc.tally, got, tc.want)
		}
	}
}

// P-3: a composite is healthy only when every source is.
func TestCombine(t *testing.T) {
	h, u, k := health.Healthy, health.Unhealthy, health.Unknown
	tests := []struct {
		in   []health.State
		want health.State
	}{
		{[]health.State{h}, h},
		{[]health.State{h, h, h}, h},
		{[]health.State{h, u, h}, u},
		{[]health.State{u}, u},
		{[]health.State{h, k}, k},
		{[]health.State{k, u}, u}, // one failing source decides, whatever the undecided do
		{[]health.State{k, k}, k},
	}
	for _, tc := range tests {
		if got := Combine(tc.in); got != tc.want {
			t.Errorf("Combine(%v) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestTallyPercent(t *testing.T) {
	if p := (Tally{Healthy: 2, Unhealthy: 1}).Percent(); p != 66 {
		t.Errorf("2/3 = %d%%, want 66", p)
	}
	if p := (Tally{}).Percent(); p != 0 {
		t.Errorf("0/0 = %d%%, want 0", p)
	}
}
