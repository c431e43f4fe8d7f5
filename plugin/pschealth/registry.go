package pschealth

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/coredns/caddy"
	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// registry holds what the pschealth blocks of one Corefile instance have claimed, so P-5 holds
// across server blocks: a destination belongs to one composite, a source or composite name to
// one definition (names label metrics and logs), and no backend is a destination.
type registry struct {
	names    map[string]bool
	dests    map[netip.Addr]string // destination -> composite
	backends map[netip.Addr]string // backend address -> source
}

type registryKey struct{}

func registryOf(c *caddy.Controller) *registry {
	if r, ok := c.Get(registryKey{}).(*registry); ok {
		return r
	}
	r := &registry{names: map[string]bool{}, dests: map[netip.Addr]string{}, backends: map[netip.Addr]string{}}
	c.Set(registryKey{}, r)
	return r
}

// claim records cfg, or fails without recording anything when it clashes with another block.
func (r *registry) claim(cfg *Config) error {
	for _, s := range cfg.Sources {
		if r.names[s.Name] {
			return fmt.Errorf("source %q: name already defined in another pschealth block", s.Name)
		}
		for _, k := range s.Backends {
			if comp, ok := r.dests[k.Addr]; ok {
				return fmt.Errorf("source %q: backend %s is the destination of composite %q: a composite cannot be a source of another composite", s.Name, k.Addr, comp)
			}
		}
	}
	for _, comp := range cfg.Composites {
		if r.names[comp.Name] {
			return fmt.Errorf("composite %q: name already defined in another pschealth block", comp.Name)
		}
		if other, ok := r.dests[comp.Destination]; ok {
			return fmt.Errorf("composite %q: destination %s is already the destination of composite %q", comp.Name, comp.Destination, other)
		}
		if src, ok := r.backends[comp.Destination]; ok {
			return fmt.Errorf("composite %q: destination %s is a backend of source %q: a composite cannot be a source of another composite", comp.Name, comp.Destination, src)
		}
	}
	for _, s := range cfg.Sources {
		r.names[s.Name] = true
		for _, k := range s.Backends {
			r.backends[k.Addr] = s.Name
		}
	}
	for _, comp := range cfg.Composites {
		r.names[comp.Name] = true
		r.dests[comp.Destination] = comp.Name
	}
	return nil
}

// publishers counts, per board and key, the pschealth instances that publish a destination. A
// destination already published when we start, by nobody of ours, belongs to another writer
// (a healthcheck loadbalancer VIP); during a reload the old instance's publication is ours and
// is no conflict.
var publishers = struct {
	sync.Mutex
	n map[*health.Board]map[health.Key]int
}{n: map[*health.Board]map[health.Key]int{}}

// publish publishes t unless another writer does already; it reports whether it published.
func publish(b *health.Board, t *health.Target) bool {
	publishers.Lock()
	defer publishers.Unlock()
	m := publishers.n[b]
	if m == nil {
		m = map[health.Key]int{}
		publishers.n[b] = m
	}
	if t.Checked() && m[t.Key()] == 0 {
		return false
	}
	m[t.Key()]++
	b.Publish(t)
	return true
}

// unpublish undoes publish. It reports whether nobody publishes t any more.
func unpublish(b *health.Board, t *health.Target) bool {
	publishers.Lock()
	defer publishers.Unlock()
	m := publishers.n[b]
	b.Unpublish(t)
	if m[t.Key()]--; m[t.Key()] <= 0 {
		delete(m, t.Key())
	}
	if len(m) == 0 {
		delete(publishers.n, b)
	}
	return !t.Checked()
}
