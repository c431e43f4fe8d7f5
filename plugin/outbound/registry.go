package outbound

import (
	"fmt"
	"sync"

	"github.com/coredns/caddy"
)

// Limits of O-4, as the reference has them.
const (
	maxPerRegion = 10
	maxPerZone   = 100
)

// registry holds the endpoints declared in one Corefile instance (O-9), so a name means the same
// endpoint, with the same ranking state and sockets, in every server block and view. It only maps
// names: what an endpoint holds at run time (its pairs) is taken by each outbound block in its
// startup and given back in its shutdown, through plugin/pkg/lifecycle.
type registry struct {
	mu       sync.Mutex
	byName   map[string]*Endpoint
	byRegion map[string]int
}

type registryKey struct{}

// registryOf returns the endpoint registry of the instance c is setting up.
func registryOf(c *caddy.Controller) *registry {
	if r, ok := c.Get(registryKey{}).(*registry); ok {
		return r
	}
	r := newRegistry()
	c.Set(registryKey{}, r)
	return r
}

func newRegistry() *registry {
	return &registry{byName: make(map[string]*Endpoint), byRegion: make(map[string]int)}
}

// declare adds e; a name declared twice and an 11th endpoint in one region are errors (O-4).
func (r *registry) declare(e *Endpoint) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byName[e.Name]; ok {
		return fmt.Errorf("endpoint %q declared twice; declare it once and name it alone elsewhere (endpoint %s)", e.Name, e.Name)
	}
	if r.byRegion[e.Region] >= maxPerRegion {
		return fmt.Errorf("endpoint %q: region %s already has %d endpoints, the most allowed per region", e.Name, e.Region, maxPerRegion)
	}
	r.byName[e.Name] = e
	r.byRegion[e.Region]++
	return nil
}

func (r *registry) lookup(name string) *Endpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byName[name]
}
