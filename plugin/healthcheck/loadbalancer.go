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
// healthy (a passthrough load balancer); otherwise it stays Unknown until every backend has a
// first verdict, then it is healthy when at least Threshold percent of them are healthy.
func (lb *Loadbalancer) derive(backends []*health.Target) (health.State, string) {
	if len(backends) == 0 {
		return health.Healthy, "no backends"
	}
	ok := 0
	for _, t := range backends {
		switch t.State() {
		case health.Unknown:
			return health.Unknown, ""
		case health.Healthy:
			ok++
		}
	}
	reason := fmt.Sprintf("%d/%d backends healthy, threshold %d%%", ok, len(backends), lb.Threshold)
	if ok*100 >= lb.Threshold*len(backends) {
		return health.Healthy, reason
	}
	return health.Unhealthy, reason
}
