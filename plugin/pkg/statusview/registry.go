package statusview

import (
	"cmp"
	"fmt"
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

// Explain asks every live explainer about q and returns the explanations of those the query
// reaches (S-2). In a server block the query goes down the plugin chain: the first instance that
// answers it stops it there, so an instance after it that also serves the name (outbound after
// routingpolicy) is left out, and named in the note of the one that answers.
func (r *Registry) Explain(q Question) []*Explanation {
	var all []*Explanation
	for _, p := range r.Live() {
		if x, ok := p.(Explainer); ok {
			if e := x.Explain(q); e != nil {
				all = append(all, e)
			}
		}
	}
	// By server block, in the order they first come; in chain order within a block, instances of
	// one plugin in the order they set up.
	var servers []string
	blocks := map[string][]*Explanation{}
	for _, e := range all {
		if _, ok := blocks[e.Server]; !ok {
			servers = append(servers, e.Server)
		}
		blocks[e.Server] = append(blocks[e.Server], e)
	}
	var out []*Explanation
	for _, srv := range servers {
		b := blocks[srv]
		slices.SortStableFunc(b, func(x, y *Explanation) int { return cmp.Compare(chainIndex(x.Plugin), chainIndex(y.Plugin)) })
		var first *Explanation // the instance that answers
		for _, e := range b {
			if first != nil {
				note := fmt.Sprintf("%s of this server block also serves zone %s but is not reached: %s answers first", e.Plugin, e.Zone, first.Plugin)
				if first.Note != "" {
					note = first.Note + "; " + note
				}
				first.Note = note
				continue
			}
			if !e.passesOn() {
				first = e
			}
			out = append(out, e)
		}
	}
	return out
}

// chainIndex is the place of plugin in CoreDNS's chain (dnsserver.Directives, which the custom
// build orders with plugin/pkg/chain).
func chainIndex(plugin string) int {
	return slices.Index(dnsserver.Directives, plugin)
}

// ServerOf names the server block c sets up as the status page shows it: "dns://example.org.:53".
func ServerOf(c *caddy.Controller) string {
	conf := dnsserver.GetConfig(c)
	return conf.Transport + "://" + conf.Zone + ":" + conf.Port
}
