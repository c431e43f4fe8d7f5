package statusview

import (
	"slices"
	"sync"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coresteer/coresteer/plugin/pkg/lifecycle"
)

// Provider is a plugin instance that shows what it knows on the status page.
type Provider interface {
	// Fill adds what the instance shows to v. It only reads (S-3) and does not block on I/O.
	Fill(v *View)
}

// Explainer is a provider that answers queries and can say why (S-2).
type Explainer interface {
	// Explain says how the instance answers q, or returns nil when q is not its to answer. It
	// only reads (S-3): no metric, no cache, no ranking is written.
	Explain(q Question) *Explanation
}

// Registry lists the providers of the running instances.
type Registry struct {
	mu      sync.Mutex
	entries []*entry
}

type entry struct {
	gen uint64
	p   Provider
}

// Default is the registry of the process, which the status plugin reads.
var Default = &Registry{}

// Register lists p in Default from the startup of the instance c sets up until its shutdown, or
// until a failed reload abandons it (plugin/pkg/lifecycle): the same path that gives back
// everything else the instance took.
func Register(c *caddy.Controller, p Provider) {
	Default.Register(c, p)
}

// Register is the package-level Register for r.
func (r *Registry) Register(c *caddy.Controller, p Provider) {
	gen := lifecycle.Generation(c)
	e := &entry{gen: gen, p: p}
	lifecycle.Hook(c, func() error { r.add(e); return nil }, func() error { r.remove(e); return nil })
}

func (r *Registry) add(e *entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, e)
}

func (r *Registry) remove(e *entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = slices.DeleteFunc(r.entries, func(x *entry) bool { return x == e })
}

// Live returns the providers of the newest running instance, in the order they started. During a
// reload the old and the new instance both run; the new one's providers are the live
// configuration's (an instance without a provider of some plugin shows none of it, even while the
// old one still runs). A failed reload's instance is removed, so the old one shows again.
func (r *Registry) Live() []Provider {
	r.mu.Lock()
	defer r.mu.Unlock()
	var newest uint64
	for _, e := range r.entries {
		newest = max(newest, e.gen)
	}
	var out []Provider
	for _, e := range r.entries {
		if e.gen == newest {
			out = append(out, e.p)
		}
	}
	return out
}

// Collect fills a View from the live providers.
func (r *Registry) Collect(v *View) {
	for _, p := range r.Live() {
		p.Fill(v)
	}
	v.Finish()
}

// Explain asks every live explainer about q and returns the explanations of those that answer it.
func (r *Registry) Explain(q Question) []*Explanation {
	var out []*Explanation
	for _, p := range r.Live() {
		if x, ok := p.(Explainer); ok {
			if e := x.Explain(q); e != nil {
				out = append(out, e)
			}
		}
	}
	return out
}

// ServerOf names the server block c sets up as the status page shows it: "dns://example.org.:53".
func ServerOf(c *caddy.Controller) string {
	conf := dnsserver.GetConfig(c)
	return conf.Transport + "://" + conf.Zone + ":" + conf.Port
}
