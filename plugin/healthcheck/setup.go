package healthcheck

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/lifecycle"
	"github.com/coresteer/coresteer/plugin/pkg/passive"
	"github.com/coresteer/coresteer/plugin/pkg/region"
	"github.com/coresteer/coresteer/plugin/pkg/statusview"
)

var log = clog.NewWithPlugin("healthcheck")

func init() { plugin.Register("healthcheck", setup) }

func setup(c *caddy.Controller) error {
	cfg, err := parse(c)
	if err != nil {
		return plugin.Error("healthcheck", err)
	}
	d := health.DemandOf(c)
	g := groupOf(c)
	for _, ch := range cfg.checks {
		if !d.DefineCheck(ch.Name) {
			return plugin.Error("healthcheck", fmt.Errorf("check %q defined twice (check names are unique in a Corefile)", ch.Name))
		}
	}
	if cfg.fleet != nil && !g.claimFleet() {
		return plugin.Error("healthcheck", fmt.Errorf("fleet defined in two healthcheck blocks (one fleet per Corefile: it is this process's membership)"))
	}
	for _, lb := range cfg.lbs {
		if !g.claimVIP(lb.VIP) {
			return plugin.Error("healthcheck", fmt.Errorf("loadbalancer %s defined twice", lb.VIP))
		}
		// A check defined in a later server block is validated at startup, when every block has
		// been set up; the backends are wanted at startup too.
	}
	h := &HealthCheck{cfg: cfg, board: health.Default, reg: defaultRegistry, demand: d, group: g, gen: lifecycle.Generation(c)}
	g.add(h)

	lifecycle.Hook(c, h.OnStartup, h.OnShutdown)
	statusview.Register(c, h)
	// healthcheck answers no query: its handler is only where ready finds it (passive.Add).
	passive.Add(c, h.Name(), h.Ready)
	return nil
}

// config is what one healthcheck block says.
type config struct {
	checks    []*Check
	lbs       []*Loadbalancer
	log       bool
	readyWait bool
	fleet     *fleetConfig // nil: the block's checks are decided by this replica alone
}

var checkName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// parse reads the healthcheck block of c. It has no side effects.
func parse(c *caddy.Controller) (*config, error) {
	cfg := &config{readyWait: true}
	coords := &region.Config{}
	i := 0
	for c.Next() {
		if i > 0 {
			return nil, plugin.ErrOnce
		}
		i++
		if len(c.RemainingArgs()) != 0 {
			return nil, c.Errf("healthcheck takes no arguments, only a block")
		}
		for c.NextBlock() {
			switch c.Val() {
			case "check":
				ch, err := parseCheck(c)
				if err != nil {
					return nil, err
				}
				for _, o := range cfg.checks {
					if o.Name == ch.Name {
						return nil, c.Errf("check %q defined twice", ch.Name)
					}
				}
				cfg.checks = append(cfg.checks, ch)
			case "loadbalancer":
				lb, err := parseLoadbalancer(c)
				if err != nil {
					return nil, err
				}
				for _, o := range cfg.lbs {
					if o.VIP == lb.VIP {
						return nil, c.Errf("loadbalancer %s defined twice", lb.VIP)
					}
				}
				cfg.lbs = append(cfg.lbs, lb)
			case "log":
				if c.NextArg() {
					return nil, c.ArgErr()
				}
				cfg.log = true
			case "ready_wait":
				args := c.RemainingArgs()
				if len(args) != 1 || (args[0] != "on" && args[0] != "off") {
					return nil, c.Errf("ready_wait %q: want on or off", strings.Join(args, " "))
				}
				cfg.readyWait = args[0] == "on"
			case "coordinates":
				if _, err := coords.Parse(c); err != nil {
					return nil, err
				}
			case "fleet":
				if cfg.fleet != nil {
					return nil, c.Errf("fleet given twice")
				}
				f, err := parseFleet(c)
				if err != nil {
					return nil, err
				}
				cfg.fleet = f
			default:
				return nil, c.Errf("unknown property %q (want check, loadbalancer, fleet, log, ready_wait or coordinates)", c.Val())
			}
		}
	}
	// Prober regions are checked once the whole block is read, so coordinates may come later.
	table := region.NewTable(coords.Coords)
	for _, ch := range cfg.checks {
		ch.Log = cfg.log
		if len(ch.Regions) == 0 {
			ch.Regions = []Region{{Name: defaultRegionName}}
			continue
		}
		for _, r := range ch.Regions {
			if _, err := table.Resolve(r.Name); err != nil {
				return nil, c.Errf("check %s: prober: %v", ch.Name, err)
			}
			// A fleet's keys are PREFIX/results/CHECK/TARGET/REGION/REPLICA (fleetmirror.go).
			if cfg.fleet != nil && strings.Contains(r.Name, "/") {
				return nil, c.Errf("check %s: prober region %q cannot be shared by a fleet: a region name in a fleet has no '/'", ch.Name, r.Name)
			}
		}
	}
	// A loadbalancer may name a check of this block defined after it, or of another block:
	// setup and startup check the latter.
	return cfg, nil
}

func parseCheck(c *caddy.Controller) (*Check, error) {
	args := c.RemainingArgs()
	if len(args) != 1 {
		return nil, c.Errf("check needs exactly one NAME, got %d arguments", len(args))
	}
	if !checkName.MatchString(args[0]) {
		return nil, c.Errf("check name %q: want letters, digits, '_', '.' or '-', starting with a letter or digit", args[0])
	}
	ch := newCheck(args[0])
	timeoutSet := false
	httpOnly := ""
	err := subBlock(c, func(prop string, args []string) error {
		one := func() (string, error) {
			if len(args) != 1 {
				return "", c.Errf("check %s: %s needs exactly one value, got %d", ch.Name, prop, len(args))
			}
			return args[0], nil
		}
		switch prop {
		case "protocol":
			v, err := one()
			if err != nil {
				return err
			}
			switch v {
			case "tcp":
				ch.Protocol = TCP
			case "http":
				ch.Protocol = HTTP
			case "https":
				ch.Protocol = HTTPS
			default:
				return c.Errf("check %s: protocol %q unknown (want tcp, http or https)", ch.Name, v)
			}
		case "port":
			v, err := one()
			if err != nil {
				return err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 65535 {
				return c.Errf("check %s: port %q out of range 1..65535", ch.Name, v)
			}
			ch.Port = uint16(n)
		case "path":
			v, err := one()
			if err != nil {
				return err
			}
			if !strings.HasPrefix(v, "/") || strings.ContainsAny(v, " \t#") {
				return c.Errf("check %s: path %q must start with '/' and have no spaces or '#'", ch.Name, v)
			}
			ch.Path = v
			httpOnly = prop
		case "host":
			v, err := one()
			if err != nil {
				return err
			}
			if strings.ContainsAny(v, " \t/") {
				return c.Errf("check %s: host %q is not a host name", ch.Name, v)
			}
			ch.Host = v
			httpOnly = prop
		case "content":
			v, err := one()
			if err != nil {
				return err
			}
			if v == "" || len(v) > 1024 {
				return c.Errf("check %s: content must be 1..1024 bytes, got %d", ch.Name, len(v))
			}
			ch.Content = v
			httpOnly = prop
		case "interval":
			v, err := one()
			if err != nil {
				return err
			}
			d, err := time.ParseDuration(v)
			// HC-1: 1s..300s (the reference allows 30s..300s for external endpoints).
			if err != nil || d < minInterval || d > maxInterval {
				return c.Errf("check %s: interval %q out of range 1s..300s", ch.Name, v)
			}
			ch.Interval = d
		case "timeout":
			v, err := one()
			if err != nil {
				return err
			}
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return c.Errf("check %s: timeout %q: want a positive duration below the interval", ch.Name, v)
			}
			ch.Timeout, timeoutSet = d, true
		case "healthy_threshold", "unhealthy_threshold":
			v, err := one()
			if err != nil {
				return err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxThreshold {
				return c.Errf("check %s: %s %q out of range 1..%d", ch.Name, prop, v, maxThreshold)
			}
			if prop == "healthy_threshold" {
				ch.HealthyThreshold = n
			} else {
				ch.UnhealthyThreshold = n
			}
		case "prober":
			if err := addProber(c, ch, args); err != nil {
				return err
			}
		case "probers_per_region":
			v, err := one()
			if err != nil {
				return err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxProbers {
				return c.Errf("check %s: probers_per_region %q out of range 1..%d", ch.Name, v, maxProbers)
			}
			ch.ProbersPerRegion = n
		case "tls_verify":
			if len(args) != 0 {
				return c.Errf("check %s: tls_verify takes no value", ch.Name)
			}
			ch.TLSVerify = true
		default:
			return c.Errf("check %s: unknown property %q", ch.Name, prop)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if ch.Timeout >= ch.Interval {
		what := "the default timeout " + ch.Timeout.String()
		if timeoutSet {
			what = "timeout " + ch.Timeout.String()
		}
		return nil, c.Errf("check %s: %s must be below the interval %s", ch.Name, what, ch.Interval)
	}
	if ch.Protocol == TCP && httpOnly != "" {
		return nil, c.Errf("check %s: %s is only for protocol http or https", ch.Name, httpOnly)
	}
	if ch.TLSVerify && ch.Protocol != HTTPS {
		return nil, c.Errf("check %s: tls_verify is only for protocol https", ch.Name)
	}
	return ch, nil
}

// addProber handles `prober REGION [SOURCE_ADDRESS]`. A region may be given once without a
// source, or once per source address.
func addProber(c *caddy.Controller, ch *Check, args []string) error {
	if len(args) < 1 || len(args) > 2 {
		return c.Errf("check %s: prober needs REGION [SOURCE_ADDRESS], got %d arguments", ch.Name, len(args))
	}
	var src netip.Addr
	if len(args) == 2 {
		a, err := netip.ParseAddr(args[1])
		if err != nil || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
			return c.Errf("check %s: prober %s: source address %q is not a unicast IP address", ch.Name, args[0], args[1])
		}
		src = a.Unmap()
	}
	for i := range ch.Regions {
		r := &ch.Regions[i]
		if r.Name != args[0] {
			continue
		}
		if !src.IsValid() || len(r.Sources) == 0 {
			return c.Errf("check %s: prober %s given twice (repeat a region only to add source addresses)", ch.Name, args[0])
		}
		if slices.Contains(r.Sources, src) {
			return c.Errf("check %s: prober %s %s given twice", ch.Name, args[0], src)
		}
		r.Sources = append(r.Sources, src)
		return nil
	}
	if len(ch.Regions) >= maxRegions {
		return c.Errf("check %s: more than %d prober regions", ch.Name, maxRegions)
	}
	r := Region{Name: args[0]}
	if src.IsValid() {
		r.Sources = []netip.Addr{src}
	}
	ch.Regions = append(ch.Regions, r)
	return nil
}

func parseLoadbalancer(c *caddy.Controller) (*Loadbalancer, error) {
	args := c.RemainingArgs()
	if len(args) != 1 {
		return nil, c.Errf("loadbalancer needs exactly one VIP, got %d arguments", len(args))
	}
	vip, err := netip.ParseAddr(args[0])
	if err != nil || vip.Zone() != "" {
		return nil, c.Errf("loadbalancer VIP %q is not an IP address", args[0])
	}
	lb := &Loadbalancer{VIP: vip.Unmap(), Threshold: defaultLBThreshold}
	seen := map[netip.AddrPort]bool{}
	err = subBlock(c, func(prop string, args []string) error {
		switch prop {
		case "backends":
			if len(args) == 0 {
				return c.Errf("loadbalancer %s: backends needs at least one ADDRESS[:PORT]", lb.VIP)
			}
			for _, a := range args {
				b, err := health.ParseTarget(a)
				if err != nil {
					return c.Errf("loadbalancer %s: backend %q: %v", lb.VIP, a, err)
				}
				if seen[b] {
					return c.Errf("loadbalancer %s: backend %s given twice", lb.VIP, a)
				}
				seen[b] = true
				lb.Backends = append(lb.Backends, b)
			}
		case "check":
			if len(args) != 1 {
				return c.Errf("loadbalancer %s: check needs exactly one NAME, got %d arguments", lb.VIP, len(args))
			}
			lb.Check = args[0]
		case "threshold":
			if len(args) != 1 {
				return c.Errf("loadbalancer %s: threshold needs exactly one PERCENT, got %d arguments", lb.VIP, len(args))
			}
			n, err := strconv.Atoi(strings.TrimSuffix(args[0], "%"))
			if err != nil || n < 0 || n > 100 {
				return c.Errf("loadbalancer %s: threshold %q out of range 0..100 (percent of healthy backends)", lb.VIP, args[0])
			}
			lb.Threshold = n
		default:
			return c.Errf("loadbalancer %s: unknown property %q (want backends, check or threshold)", lb.VIP, prop)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(lb.Backends) > 0 && lb.Check == "" {
		return nil, c.Errf("loadbalancer %s: backends need a check NAME to probe them", lb.VIP)
	}
	return lb, nil
}

// subBlock calls fn for every property of the optional block that follows the current line's
// arguments (`check NAME { ... }` inside `healthcheck { ... }`). caddy's NextBlock does not
// nest, so the block is walked token by token.
func subBlock(c *caddy.Controller, fn func(prop string, args []string) error) error {
	if !c.NextArg() {
		return nil // no block
	}
	if c.Val() != "{" {
		return c.Errf("unexpected %q, want '{' or the end of the line", c.Val())
	}
	for c.Next() {
		if c.Val() == "}" {
			return nil
		}
		if c.Val() == "{" {
			return c.Errf("unexpected '{'")
		}
		if err := fn(c.Val(), c.RemainingArgs()); err != nil {
			return err
		}
	}
	return c.EOFErr()
}
