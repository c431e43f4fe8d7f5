package routingpolicy

import (
	"math"
	"net/netip"
	"strings"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/health"

	"github.com/miekg/dns"
)

const draws = 100_000

// within fails unless got out of n is within 6 standard deviations of share p: a correct
// implementation fails this less than once in a hundred million runs.
func within(t *testing.T, what string, got, n int, p float64) {
	t.Helper()
	mean := float64(n) * p
	sigma := math.Sqrt(float64(n) * p * (1 - p))
	if math.Abs(float64(got)-mean) > 6*sigma+1 {
		t.Errorf("%s: %d of %d, want %.0f ± %.0f (share %.3f)", what, got, n, mean, 6*sigma, p)
	}
}

func TestWRRWeights(t *testing.T) {
	// R-WRR-2: one bucket per query with probability weight / sum; all of a bucket's addresses in
	// random order.
	rp, _ := newTest(t, `routingpolicy example.org {
		wrr www A 60 "25=10.0.0.1;75=10.0.0.2,10.0.0.3"
	}`)
	got := count(t, rp, "www.example.org.", "10.1.1.1", draws)
	if len(got) != 2 {
		t.Fatalf("want two buckets, got %v", got)
	}
	within(t, "weight 25", got["10.0.0.1"], draws, 0.25)
	within(t, "weight 75", got["10.0.0.2,10.0.0.3"], draws, 0.75)

	first := 0
	n := 0
	for range 20_000 {
		m := ask(t, rp, "www.example.org.", dns.TypeA, "10.1.1.1")
		if len(m.Answer) == 2 {
			n++
			if m.Answer[0].(*dns.A).A.String() == "10.0.0.2" {
				first++
			}
		}
	}
	within(t, "random order within a bucket", first, n, 0.5)
}

func TestWRRAllZero(t *testing.T) {
	// R-WRR-3: all weights 0 split evenly.
	rp, _ := newTest(t, `routingpolicy example.org {
		wrr www A 60 "0=10.0.0.1;0=10.0.0.2;0=10.0.0.3"
	}`)
	got := count(t, rp, "www.example.org.", "10.1.1.1", draws)
	for _, a := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		within(t, "zero weight "+a, got[a], draws, 1.0/3)
	}
}

func TestWRRHealth(t *testing.T) {
	// R-WRR-4: only healthy addresses of a bucket; an all-unhealthy bucket's share goes to the
	// others in proportion to their weights.
	rp, b := newTest(t, `routingpolicy example.org {
		wrr www A 60 "1=10.0.0.1;1=10.0.0.2;2=10.0.0.3,10.0.0.4" healthcheck web
	}`)
	set(b, "web", "10.0.0.4", health.Unhealthy)
	got := count(t, rp, "www.example.org.", "10.1.1.1", 2000)
	if got["10.0.0.3,10.0.0.4"] != 0 || got["10.0.0.3"] == 0 {
		t.Fatalf("unhealthy address served: %v", got)
	}
	set(b, "web", "10.0.0.1", health.Unhealthy)
	got = count(t, rp, "www.example.org.", "10.1.1.1", draws)
	if got["10.0.0.1"] != 0 {
		t.Fatalf("unhealthy bucket served: %v", got)
	}
	within(t, "weight 1 of 3", got["10.0.0.2"], draws, 1.0/3)
	within(t, "weight 2 of 3", got["10.0.0.3"], draws, 2.0/3)
	// Unknown counts as healthy (H-2): a target back to unknown is served again.
	set(b, "web", "10.0.0.1", health.Unknown)
	if got := count(t, rp, "www.example.org.", "10.1.1.1", 2000); got["10.0.0.1"] == 0 {
		t.Fatalf("unknown target not served: %v", got)
	}
}

func TestWRRZeroWeightUnchecked(t *testing.T) {
	// R-WRR-5: checks on the non-zero items (load-balancer VIPs on the board) but not on the
	// zero-weight one: the zero-weight item is always healthy and only answers when every
	// non-zero item is unhealthy.
	rp, b := newTest(t, `routingpolicy example.org {
		wrr www A 60 "0=10.0.0.9;3=10.0.0.1;1=10.0.0.2"
	}`)
	set(b, "", "10.0.0.1", health.Healthy)
	set(b, "", "10.0.0.2", health.Healthy)
	got := count(t, rp, "www.example.org.", "10.1.1.1", draws)
	if got["10.0.0.9"] != 0 {
		t.Fatalf("zero-weight item served while non-zero ones are healthy: %v", got)
	}
	within(t, "weight 3", got["10.0.0.1"], draws, 0.75)
	set(b, "", "10.0.0.1", health.Unhealthy)
	got = count(t, rp, "www.example.org.", "10.1.1.1", 2000)
	if got["10.0.0.2"] != 2000 {
		t.Fatalf("want only the healthy non-zero item: %v", got)
	}
	set(b, "", "10.0.0.2", health.Unhealthy)
	got = count(t, rp, "www.example.org.", "10.1.1.1", 2000)
	if got["10.0.0.9"] != 2000 {
		t.Fatalf("want the zero-weight item when every non-zero item is unhealthy: %v", got)
	}
}

func TestWRRAllUnhealthyNeverZero(t *testing.T) {
	// R-WRR-6: checks on every item and all unhealthy: a non-zero item answers, never a zero
	// one. R-WRR-7: all addresses of the chosen bucket (fail open).
	rp, b := newTest(t, `routingpolicy example.org {
		wrr www A 60 "0=10.0.0.9;1=10.0.0.1,10.0.0.3;3=10.0.0.2" healthcheck web
	}`)
	for _, a := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.9"} {
		set(b, "web", a, health.Unhealthy)
	}
	got := count(t, rp, "www.example.org.", "10.1.1.1", draws)
	if got["10.0.0.9"] != 0 {
		t.Fatalf("zero-weight item served when everything is unhealthy: %v", got)
	}
	within(t, "fail open weight 1", got["10.0.0.1,10.0.0.3"], draws, 0.25)
	within(t, "fail open weight 3", got["10.0.0.2"], draws, 0.75)
}

func TestWRRFailOpenAllZero(t *testing.T) {
	// R-WRR-7 with R-WRR-3: every item unhealthy and all weights 0: even split of whole buckets.
	rp, b := newTest(t, `routingpolicy example.org {
		wrr www A 60 "0=10.0.0.1;0=10.0.0.2" healthcheck web
	}`)
	set(b, "web", "10.0.0.1", health.Unhealthy)
	set(b, "web", "10.0.0.2", health.Unhealthy)
	got := count(t, rp, "www.example.org.", "10.1.1.1", draws)
	within(t, "fail open even", got["10.0.0.1"], draws, 0.5)
}

func TestWRRWeightRange(t *testing.T) {
	// R-WRR-1: weights 0..1000 inclusive.
	for _, w := range []string{"0", "1000", "0.5"} {
		if err := loadErr(`routingpolicy example.org {
			wrr www A 60 "` + w + `=10.0.0.1"
		}`); err != nil {
			t.Errorf("weight %s: %v", w, err)
		}
	}
	for _, w := range []string{"1001", "-1", "NaN", "x"} {
		err := loadErr(`routingpolicy example.org {
			wrr www A 60 "` + w + `=10.0.0.1"
		}`)
		if err == nil || !strings.Contains(err.Error(), "weight") {
			t.Errorf("weight %s accepted", w)
		}
	}
}

var _ = netip.Addr{}
