package status

import (
	"fmt"
	"net"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"
	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/lifecycle"
	"github.com/coresteer/coresteer/plugin/pkg/statusview"
)

// defaultAddr is loopback: the page shows configuration and internal addresses.
const defaultAddr = "127.0.0.1:8182"

func init() { plugin.Register("status", setup) }

type onceKey struct{}

func setup(c *caddy.Controller) error {
	addr, err := parse(c)
	if err != nil {
		return plugin.Error("status", err)
	}
	// Like health and ready, one per process: the page shows the whole process.
	if prev, ok := c.Get(onceKey{}).(string); ok {
		return plugin.Error("status", fmt.Errorf("status is process wide and may appear in one server block only (already in %s)", prev))
	}
	c.Set(onceKey{}, statusview.ServerOf(c))

	s := New(addr, statusview.Default, health.Default)
	// The listener is taken at startup and given back at shutdown, or when a failed reload
	// abandons this instance (plugin/pkg/lifecycle). During a reload the old and the new instance
	// both listen (SO_REUSEPORT) and both show the live view.
	lifecycle.Hook(c, s.start, s.stop)
	// The health board, shown by the instance: this also marks the instance's generation, so the
	// page follows a reload to a Corefile with no other coresteer plugin.
	statusview.Register(c, boardView{board: health.Default})
	// Not a handler: status adds nothing to the query path (S-3).
	return nil
}

// parse reads `status [ADDRESS]`.
func parse(c *caddy.Controller) (string, error) {
	addr := defaultAddr
	n := 0
	for c.Next() {
		if n++; n > 1 {
			return "", plugin.ErrOnce
		}
		args := c.RemainingArgs()
		switch len(args) {
		case 0:
		case 1:
			_, port, err := net.SplitHostPort(args[0])
			if err != nil {
				return "", c.Errf("address %q is not HOST:PORT (default %s): %v", args[0], defaultAddr, err)
			}
			// What the listener takes: a number, or a service name (http).
			if _, err := net.LookupPort("tcp", port); err != nil {
				return "", c.Errf("address %q: port %q is neither a number of 0..65535 nor a known service name", args[0], port)
			}
			addr = args[0]
		default:
			return "", c.ArgErr()
		}
		if c.NextBlock() {
			return "", c.Errf("unknown property %q (status takes no block)", c.Val())
		}
	}
	return addr, nil
}
