package pschealth

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"
	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/lifecycle"
	"github.com/coresteer/coresteer/plugin/pkg/passive"
	"github.com/coresteer/coresteer/plugin/pkg/statusview"
)

const pluginName = "pschealth"

func init() { plugin.Register(pluginName, setup) }

func setup(c *caddy.Controller) error {
	_, err := setupBlock(c)
	return err
}

// setupBlock sets up the pschealth block of c and returns its instance. pschealth answers no
// query: its handler is only where ready finds it (passive.Add).
func setupBlock(c *caddy.Controller) (*PSCHealth, error) {
	d := health.DemandOf(c)
	cfg, err := parse(c, d)
	if err != nil {
		return nil, plugin.Error(pluginName, err)
	}
	// P-5 across server blocks: one destination, one name, per Corefile.
	if err := registryOf(c).claim(cfg); err != nil {
		return nil, plugin.Error(pluginName, err)
	}
	p := New(cfg, health.Default)
	p.demand = d // the backends are wanted from OnStartup on
	p.gen = lifecycle.Generation(c)
	lifecycle.Hook(c, p.OnStartup, p.OnShutdown)
	statusview.Register(c, p)
	passive.Add(c, pluginName, p.Ready)
	return p, nil
}

// checks is what parse needs to know about the healthcheck checks of the instance;
// *health.Demand implements it.
type checks interface {
	HasCheck(name string) bool
	Checks() []string
}

// parse reads the pschealth blocks of one server block. It has no side effects.
func parse(c *caddy.Controller, hc checks) (*Config, error) {
	cfg := &Config{Policies: map[string]Policy{}}
	// Raw references, resolved once every name is known so definitions may come in any order.
	srcPolicy := map[*Source]string{}
	compSources := map[*Composite][]string{}
	sources := map[string]*Source{}
	composites := map[string]*Composite{}

	for c.Next() {
		if len(c.RemainingArgs()) != 0 {
			return nil, c.ArgErr()
		}
		for c.NextBlock() {
			switch c.Val() {
			case "policy":
				p, err := parsePolicy(c)
				if err != nil {
					return nil, err
				}
				if _, dup := cfg.Policies[p.Name]; dup {
					return nil, c.Errf("policy %q defined twice", p.Name)
				}
				cfg.Policies[p.Name] = p
			case "source":
				s, pol, err := parseSource(c)
				if err != nil {
					return nil, err
				}
				if sources[s.Name] != nil || composites[s.Name] != nil {
					return nil, c.Errf("source %q: name already used by another source or composite", s.Name)
				}
				sources[s.Name] = s
				srcPolicy[s] = pol
				cfg.Sources = append(cfg.Sources, s)
			case "composite":
				comp, names, err := parseComposite(c)
				if err != nil {
					return nil, err
				}
				if sources[comp.Name] != nil || composites[comp.Name] != nil {
					return nil, c.Errf("composite %q: name already used by another source or composite", comp.Name)
				}
				composites[comp.Name] = comp
				compSources[comp] = names
				cfg.Composites = append(cfg.Composites, comp)
			case "dry_run":
				if c.NextArg() {
					return nil, c.Errf("dry_run takes no value, got %q", c.Val())
				}
				cfg.DryRun = true
			default:
				return nil, c.Errf("unknown property %q (allowed: policy, source, composite, dry_run)", c.Val())
			}
		}
	}

	if len(cfg.Composites) == 0 {
		return nil, fmt.Errorf("no composite defined: a pschealth block publishes at least one composite")
	}

	// Resolve source policies and checks.
	for _, s := range cfg.Sources {
		name := srcPolicy[s]
		switch p, ok := cfg.Policies[name]; {
		case name == "":
			s.Policy = DefaultPolicy()
		case ok:
			s.Policy = p
		default:
			return nil, fmt.Errorf("source %q: unknown policy %q (defined: %s)", s.Name, name, list(keys(cfg.Policies)))
		}
		if s.Policy.MinCount > len(s.Backends) {
			return nil, fmt.Errorf("source %q: %s needs %d healthy backends but the source has only %d: it could never be healthy",
				s.Name, s.Policy, s.Policy.MinCount, len(s.Backends))
		}
		if !hc.HasCheck(s.Check) {
			return nil, fmt.Errorf("source %q: check %q is not defined by healthcheck (defined: %s)", s.Name, s.Check, list(hc.Checks()))
		}
	}

	// Resolve composite sources (P-5) and destinations.
	dests := map[netip.Addr]string{}
	for _, comp := range cfg.Composites {
		seen := map[string]bool{}
		for _, n := range compSources[comp] {
			if composites[n] != nil {
				return nil, fmt.Errorf("composite %q: %q is a composite and a composite cannot be a source of another composite", comp.Name, n)
			}
			s := sources[n]
			if s == nil {
				return nil, fmt.Errorf("composite %q: unknown source %q (defined: %s)", comp.Name, n, list(keys(sources)))
			}
			if seen[n] {
				return nil, fmt.Errorf("composite %q: source %q listed twice", comp.Name, n)
			}
			seen[n] = true
			comp.Sources = append(comp.Sources, s)
		}
		if other, dup := dests[comp.Destination]; dup {
			return nil, fmt.Errorf("composite %q: destination %s is already the destination of composite %q", comp.Name, comp.Destination, other)
		}
		dests[comp.Destination] = comp.Name
	}
	// A backend that is a destination would feed a composite state back into a source: the
	// only way to build a cycle with this syntax (P-5).
	for _, s := range cfg.Sources {
		for _, k := range s.Backends {
			if comp, ok := dests[k.Addr]; ok {
				return nil, fmt.Errorf("source %q: backend %s is the destination of composite %q: a composite cannot be a source of another composite", s.Name, k.Addr, comp)
			}
		}
	}
	return cfg, nil
}

// parsePolicy reads `policy NAME [min_healthy_percent P] [min_healthy N]`.
func parsePolicy(c *caddy.Controller) (Policy, error) {
	args := c.RemainingArgs()
	if len(args) == 0 {
		return Policy{}, c.Errf("policy needs a name: policy NAME [min_healthy_percent P] [min_healthy N]")
	}
	p := DefaultPolicy()
	p.Name = args[0]
	if p.Name == defaultPolicyName {
		return Policy{}, c.Errf("policy name %q is reserved for the built-in policy (min_healthy_percent %d, min_healthy %d)", p.Name, defaultMinPercent, defaultMinCount)
	}
	seen := map[string]bool{}
	for rest := args[1:]; len(rest) > 0; rest = rest[2:] {
		prop := rest[0]
		if prop != "min_healthy_percent" && prop != "min_healthy" {
			return Policy{}, c.Errf("policy %q: unknown property %q (allowed: min_healthy_percent, min_healthy)", p.Name, prop)
		}
		if len(rest) < 2 {
			return Policy{}, c.Errf("policy %q: %s needs a value", p.Name, prop)
		}
		if seen[prop] {
			return Policy{}, c.Errf("policy %q: %s given twice", p.Name, prop)
		}
		seen[prop] = true
		val := rest[1]
		switch prop {
		case "min_healthy_percent":
			n, err := strconv.Atoi(strings.TrimSuffix(val, "%"))
			if err != nil || n < 0 || n > 100 {
				return Policy{}, c.Errf("policy %q: min_healthy_percent %q is not an integer in 0..100", p.Name, val)
			}
			p.MinPercent = n
		case "min_healthy":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 || n > maxBackends {
				return Policy{}, c.Errf("policy %q: min_healthy %q is not an integer in 0..%d", p.Name, val, maxBackends)
			}
			p.MinCount = n
		}
	}
	return p, nil
}

// maxBackends bounds a source, so a typo cannot ask for millions of probes.
const maxBackends = 10000

// parseSource reads a source block; it returns the source and the name of its policy ("" for
// the built-in one), resolved by the caller.
func parseSource(c *caddy.Controller) (*Source, string, error) {
	args := c.RemainingArgs()
	if len(args) != 1 {
		return nil, "", c.Errf("source needs exactly one name, got %d values", len(args))
	}
	s := &Source{Name: args[0]}
	var addrs []netip.AddrPort // port 0: the check's port
	policy := ""
	seen := map[netip.AddrPort]bool{}
	hasPolicy := false
	for c.NextBlock() {
		switch prop := c.Val(); prop {
		case "backends":
			vals := c.RemainingArgs()
			if len(vals) == 0 {
				return nil, "", c.Errf("source %q: backends needs at least one ADDRESS[:PORT]", s.Name)
			}
			for _, v := range vals {
				ap, err := health.ParseTarget(v)
				if err != nil {
					return nil, "", c.Errf("source %q: backends %q: %v", s.Name, v, err)
				}
				if seen[ap] {
					return nil, "", c.Errf("source %q: backend %q listed twice", s.Name, v)
				}
				seen[ap] = true
				addrs = append(addrs, ap)
			}
			if len(addrs) > maxBackends {
				return nil, "", c.Errf("source %q: %d backends, at most %d allowed", s.Name, len(addrs), maxBackends)
			}
		case "check":
			vals := c.RemainingArgs()
			if len(vals) != 1 {
				return nil, "", c.Errf("source %q: check needs exactly one check name, got %d values", s.Name, len(vals))
			}
			if s.Check != "" {
				return nil, "", c.Errf("source %q: check given twice (%q and %q)", s.Name, s.Check, vals[0])
			}
			s.Check = vals[0]
		case "policy":
			vals := c.RemainingArgs()
			if len(vals) != 1 {
				return nil, "", c.Errf("source %q: policy needs exactly one policy name, got %d values", s.Name, len(vals))
			}
			if hasPolicy {
				return nil, "", c.Errf("source %q: policy given twice (%q and %q)", s.Name, policy, vals[0])
			}
			hasPolicy = true
			policy = vals[0]
			if policy == defaultPolicyName {
				policy = ""
			}
		default:
			return nil, "", c.Errf("source %q: unknown property %q (allowed: backends, check, policy)", s.Name, prop)
		}
	}
	if len(addrs) == 0 {
		return nil, "", c.Errf("source %q has no backends: a source needs at least one backend", s.Name)
	}
	if s.Check == "" {
		return nil, "", c.Errf("source %q has no check: name the healthcheck check that probes its backends", s.Name)
	}
	for _, ap := range addrs {
		s.Backends = append(s.Backends, health.Key{Check: s.Check, Addr: ap.Addr(), Port: ap.Port()})
	}
	return s, policy, nil
}

// parseComposite reads a composite block; source names are resolved by the caller.
func parseComposite(c *caddy.Controller) (*Composite, []string, error) {
	args := c.RemainingArgs()
	if len(args) != 1 {
		return nil, nil, c.Errf("composite needs exactly one name, got %d values", len(args))
	}
	comp := &Composite{Name: args[0]}
	var names []string
	for c.NextBlock() {
		switch prop := c.Val(); prop {
		case "sources":
			vals := c.RemainingArgs()
			if len(vals) == 0 {
				return nil, nil, c.Errf("composite %q: sources needs at least one source name", comp.Name)
			}
			names = append(names, vals...)
		case "destination":
			vals := c.RemainingArgs()
			if len(vals) != 1 {
				return nil, nil, c.Errf("composite %q: destination needs exactly one IP address, got %d values", comp.Name, len(vals))
			}
			if comp.Destination.IsValid() {
				return nil, nil, c.Errf("composite %q: destination given twice (%s and %q)", comp.Name, comp.Destination, vals[0])
			}
			a, err := netip.ParseAddr(vals[0])
			if err != nil {
				return nil, nil, c.Errf("composite %q: destination %q is not an IP address (a port is not allowed)", comp.Name, vals[0])
			}
			if err := health.ValidTarget(a); err != nil {
				return nil, nil, c.Errf("composite %q: destination %q: %v", comp.Name, vals[0], err)
			}
			comp.Destination = a.Unmap()
		default:
			return nil, nil, c.Errf("composite %q: unknown property %q (allowed: sources, destination)", comp.Name, prop)
		}
	}
	if len(names) == 0 {
		return nil, nil, c.Errf("composite %q has no sources: list at least one with sources SOURCE...", comp.Name)
	}
	if !comp.Destination.IsValid() {
		return nil, nil, c.Errf("composite %q has no destination: give the address its state is published under", comp.Name)
	}
	return comp, names, nil
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
