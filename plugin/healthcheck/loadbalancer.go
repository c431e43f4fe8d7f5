package healthcheck

import (
	"fmt"
	"net/netip"

	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// defaultLBThreshold is the share of healthy backends that keeps a VIP healthy (HC-4).
const defaultLBThreshold = 20

// Loadbalancer is a virtual IP whose health derives from its backends (HC-4).
type Loadbalancer struct {
	VIP       netip.Addr
	Backends  []netip.AddrPort // port 0: the check's port
	Check     string
	Threshold int // percent of healthy backends, 0..100
}

// keys returns the board keys of the backends.
func (lb *Loadbalancer) keys() []health.Key {
	out := make([]health.Key, len(lb.Backends))
	for i, b := range lb.Backends {
		out[i] = health.Key{Check: lb.Check, Addr: b.Addr(), Port: b.Port()}
	}
	return out
}

// derive computes the state of the VIP from its backends (HC-4): a group with no backend is
// healthy (a passthrough load balancer); otherwise it is healthy when at least Threshold percent
// of its backends are healthy. It is decided as soon as the backends without a verdict cannot
// change that outcome whatever their verdicts will be, and Unknown only until then: a backend that
// is never probed holds nothing back once the others settle it.
func (lb *Loadbalancer) derive(backends []*health.Target) (health.State, string) {
	n := len(backends)
	if n == 0 {
		return health.Healthy, "no backends"
	}
	ok, unknown := 0, 0
	for _, t := range backends {
		switch t.State() {
		case health.Unknown:
			unknown++
		case health.Healthy:
			ok++
		}
	}
	reason := fmt.Sprintf("%d/%d backends healthy, threshold %d%%", ok, n, lb.Threshold)
	if unknown > 0 {
		reason += fmt.Sprintf(", %d without a verdict", unknown)
	}
	switch {
	case ok*100 >= lb.Threshold*n: // even if every undecided backend turns out unhealthy
		return health.Healthy, reason
	case (ok+unknown)*100 < lb.Threshold*n: // even if every undecided backend turns out healthy
		return health.Unhealthy, reason
	}
	return health.Unknown, ""
}
