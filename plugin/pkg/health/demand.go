package health

import (
	"sort"
	"sync"

	"github.com/coredns/caddy"
)

// Demand collects, during the setup of one Corefile instance, the checks that are defined and
// the targets that consumers want probed. healthcheck reads it at startup, so a target is probed
// once however many record sets, zones or server blocks name it (H-3). A reload builds a new
// Demand; the old instance's probes are released by its shutdown.
type Demand struct {
	mu     sync.Mutex
	checks map[string]bool
	wanted map[Key]bool
}

type demandKey struct{}

// DemandOf returns the Demand of the Corefile instance that c is setting up.
func DemandOf(c *caddy.Controller) *Demand {
	if d, ok := c.Get(demandKey{}).(*Demand); ok {
		return d
	}
	d := &Demand{checks: make(map[string]bool), wanted: make(map[Key]bool)}
	c.Set(demandKey{}, d)
	return d
}

// DefineCheck records that a check named name exists in this instance. It returns false when
// the name was defined already.
func (d *Demand) DefineCheck(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.checks[name] {
		return false
	}
	d.checks[name] = true
	return true
}

// HasCheck reports whether a check named name is defined in this instance.
func (d *Demand) HasCheck(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.checks[name]
}

// Checks returns the names of the defined checks, sorted.
func (d *Demand) Checks() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, 0, len(d.checks))
	for n := range d.checks {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Want asks for k to be probed.
func (d *Demand) Want(k Key) {
	d.mu.Lock()
	d.wanted[k] = true
	d.mu.Unlock()
}

// Wanted returns every key asked for, sorted by check and address.
func (d *Demand) Wanted() []Key {
	d.mu.Lock()
	out := make([]Key, 0, len(d.wanted))
	for k := range d.wanted {
		out = append(out, k)
	}
	d.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].less(out[j]) })
	return out
}
