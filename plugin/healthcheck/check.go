package healthcheck

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Protocol is how a check probes a target.
type Protocol uint8

// The protocols of a check.
const (
	TCP Protocol = iota
	HTTP
	HTTPS
)

// String returns the Corefile spelling of p.
func (p Protocol) String() string {
	switch p {
	case HTTP:
		return "http"
	case HTTPS:
		return "https"
	default:
		return "tcp"
	}
}

// Defaults and limits of a check (HC-1).
const (
	defaultPort       = 80
	defaultInterval   = 30 * time.Second
	defaultTimeout    = 5 * time.Second
	minInterval       = 1 * time.Second
	maxInterval       = 300 * time.Second
	defaultThreshold  = 2
	maxThreshold      = 100
	maxProbers        = 10
	maxRegions        = 20
	defaultRegionName = "local"
	// maxBody bounds how much of an HTTP body is read to look for content.
	maxBody = 64 << 10
)

// Region is one prober region of a check: its probers bind to Sources, in turn; with no source
// the kernel picks the source address.
type Region struct {
	Name    string
	Sources []netip.Addr
}

// Check is a named check: how a target is probed, how often, and how results become a state.
type Check struct {
	Name               string
	Protocol           Protocol
	Port               uint16
	Path               string
	Host               string
	Content            string
	Interval           time.Duration
	Timeout            time.Duration
	HealthyThreshold   int
	UnhealthyThreshold int
	Regions            []Region
	ProbersPerRegion   int
	TLSVerify          bool
	// Log is set from the block's log property: every failed probe round is logged (state
	// changes always are).
	Log bool
}

// newCheck returns a check with the defaults.
func newCheck(name string) *Check {
	return &Check{
		Name:               name,
		Protocol:           TCP,
		Port:               defaultPort,
		Path:               "/",
		Interval:           defaultInterval,
		Timeout:            defaultTimeout,
		HealthyThreshold:   defaultThreshold,
		UnhealthyThreshold: defaultThreshold,
		ProbersPerRegion:   1,
	}
}

// slots returns the number of probes of one round: every prober of every region.
func (c *Check) slots() int { return len(c.Regions) * c.ProbersPerRegion }

// source returns the address prober i of region r binds to, or the zero Addr for none. With
// one source address per region every prober of that region uses it; with several they are
// used in turn.
func (c *Check) source(r, i int) netip.Addr {
	s := c.Regions[r].Sources
	if len(s) == 0 {
		return netip.Addr{}
	}
	return s[i%len(s)]
}

// identity is everything that decides what a probe does. When a reload changes it for a
// target, the target's consecutive-result counters restart (its state is kept); interval,
// timeout, thresholds and log can change without touching them.
func (c *Check) identity() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%d|%q|%q|%q|%t|%d", c.Protocol, c.Port, c.Path, c.Host, c.Content, c.TLSVerify, c.ProbersPerRegion)
	for _, r := range c.Regions {
		fmt.Fprintf(&b, "|%s=%v", r.Name, r.Sources)
	}
	return b.String()
}
