package pschealth

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// Source is a health source (P-2): one backend service, its backends probed with a healthcheck
// check, judged by one policy.
type Source struct {
	Name     string
	Check    string
	Backends []health.Key // Key{Check, addr, port}; port 0 is the check's port
	Policy   Policy
}

// Composite is a composite check (P-3) publishing its state under Destination (P-4).
type Composite struct {
	Name        string
	Sources     []*Source
	Destination netip.Addr
}

// Key is the board key the composite state is published under: a derived virtual IP, which
// every consumer of the address acquires for an address with no check of its own (P-4).
func (c *Composite) Key() health.Key { return health.Key{Addr: c.Destination} }

// Config is what a pschealth block configures.
type Config struct {
	Policies   map[string]Policy
	Sources    []*Source // in order of definition
	Composites []*Composite
	DryRun     bool
}

// verdict is the computed state of a source with the counts that led to it.
type verdict struct {
	src   *Source
	tally Tally
	state health.State
}

// describe explains a source verdict for logs: counts against the policy's thresholds.
func (v verdict) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "source %q %d/%d backends healthy (%d%%)", v.src.Name, v.tally.Healthy, v.tally.Total(), v.tally.Percent())
	if v.tally.Unknown > 0 {
		fmt.Fprintf(&b, ", %d without a verdict", v.tally.Unknown)
	}
	switch v.state {
	case health.Healthy:
		b.WriteString(", meets ")
	case health.Unhealthy:
		b.WriteString(", below ")
	default:
		b.WriteString(", undecided against ")
	}
	b.WriteString(v.src.Policy.String())
	return b.String()
}

// cause explains the state of a composite: for Unhealthy the sources that fail their policy, for
// Unknown the undecided ones, for Healthy every source.
func cause(state health.State, vs []verdict) string {
	var parts []string
	for _, v := range vs {
		if state == health.Healthy || v.state == state {
			parts = append(parts, v.describe())
		}
	}
	return strings.Join(parts, "; ")
}
