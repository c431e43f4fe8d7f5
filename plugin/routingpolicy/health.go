package routingpolicy

import (
	"fmt"
	"sort"

	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/lifecycle"
)

// each calls fn for every address of every item of p, the failover backup included.
func (p *policy) each(fn func(*addr)) {
	for i := range p.items {
		for j := range p.items[i].addrs {
			fn(&p.items[i].addrs[j])
		}
	}
	if p.backup != nil {
		p.backup.each(fn)
	}
}

// checks returns the checks p names, sorted.
func (p *policy) checks() []string {
	seen := map[string]bool{}
	p.each(func(a *addr) {
		if a.explicit {
			seen[a.key.Check] = true
		}
	})
	out := make([]string, 0, len(seen))
	for c := range seen {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// checkChecks returns an error when a record set names a check that no healthcheck block of the
// Corefile defines, for inline data at setup and for every file reload alike (R-ZONE-3).
func (d *data) checkChecks(demand *health.Demand) error {
	for _, p := range d.policies {
		for _, ck := range p.checks() {
			if !demand.HasCheck(ck) {
				return fmt.Errorf("%s %s: healthcheck %q is not defined (define it with a healthcheck block)", p.kind, p.label, ck)
			}
		}
	}
	return nil
}

// acquire resolves every address of d to its board target: Key{CHECK, ADDR} for an address its
// record set checks, Key{"", ADDR} for the others, which count as checked when a load-balancer
// VIP or a pschealth destination publishes them. R-SEC-1 is checked against them.
func (d *data) acquire(b *health.Board) {
	for _, p := range d.policies {
		p.each(func(a *addr) {
			if a.hasKey {
				a.t = b.Acquire(a.key)
			}
		})
	}
}

// release gives back what acquire took.
func (d *data) release(b *health.Board) {
	for _, p := range d.policies {
		p.each(func(a *addr) {
			if a.t != nil {
				b.Release(a.t)
			}
		})
	}
}

// holdings is what the data a block serves states beyond its board targets: the probe demand of
// its health-checked addresses and its metric series.
type holdings struct {
	wants  []func()
	items  [][3]string // zone, name, item: held in itemSeries
	sets   [][2]string // zone, name: held in setSeries
	shares []*lifecycle.Writer
}

// declare makes d what the block serves, once every check passed: it wants the addresses its
// record sets check probed (H-6: the same call at startup and on a file reload, released by
// withdraw on a file reload, at shutdown, and when a failed reload is abandoned) and holds its
// metric series, setting the configured shares.
func (d *data) declare(demand *health.Demand, gen uint64) *holdings {
	h := &holdings{}
	for _, p := range d.policies {
		p.each(func(a *addr) {
			if a.explicit {
				h.wants = append(h.wants, demand.Want(a.key))
			}
		})
		h.sets = append(h.sets, [2]string{p.zone, p.label})
		setSeries.Hold(p.zone, p.label)
		for q := p; q != nil; q = q.backup {
			for _, it := range q.items {
				h.items = append(h.items, [3]string{p.zone, p.label, it.label})
				itemSeries.Hold(p.zone, p.label, it.label)
			}
		}
		if p.kind == WRR {
			var w *lifecycle.Writer
			w = shareWriters.Join([2]string{p.zone, p.label}, gen, func() { w.Write(p.setShares) })
			w.Write(p.setShares)
			h.shares = append(h.shares, w)
		}
	}
	return h
}

// withdraw gives back what declare took.
func (h *holdings) withdraw() {
	for _, release := range h.wants {
		release()
	}
	for _, w := range h.shares {
		w.Leave()
	}
	for _, k := range h.items {
		itemSeries.Release(k[:]...)
	}
	for _, k := range h.sets {
		setSeries.Release(k[:]...)
	}
}

// checkDNSSEC enforces R-SEC-1 on every health-checked policy: one address per item and no mix of
// checked and unchecked addresses. An address is checked when its record set names a check or
// (once acquired) the board publishes it.
func (d *data) checkDNSSEC() error {
	for _, p := range d.policies {
		if err := p.checkDNSSEC(); err != nil {
			return err
		}
	}
	return nil
}

func (p *policy) checkDNSSEC() error {
	checked, unchecked := 0, 0
	p.each(func(a *addr) {
		if a.checked() {
			checked++
		} else {
			unchecked++
		}
	})
	if checked == 0 {
		return nil
	}
	if unchecked > 0 {
		return fmt.Errorf("%s %s: with dnssec, a health-checked policy cannot mix checked and unchecked addresses (%d checked, %d unchecked) (R-SEC-1)", p.kind, p.label, checked, unchecked)
	}
	for q := p; q != nil; q = q.backup {
		for i := range q.items {
			if n := len(q.items[i].addrs); n != 1 {
				return fmt.Errorf("%s %s: with dnssec, a health-checked policy allows one address per item, item %s has %d (R-SEC-1)", p.kind, p.label, q.items[i].label, n)
			}
		}
	}
	return nil
}

// forwarder is what a forwarding plugin in the same server block (outbound) exposes so a policy
// on a name it forwards is refused (DESIGN.md section 5). A name under one of its `except`
// sub-zones is not forwarded, so a policy there is fine (a geo zone of regional resolvers).
type forwarder interface {
	Forwards(name string) bool
}

// checkForwarded returns an error when a policy record set names something f forwards.
func (d *data) checkForwarded(f forwarder) error {
	for _, p := range d.policies {
		if f.Forwards(p.name) {
			return fmt.Errorf("%s %s: policies are not allowed on %s, which outbound forwards", p.kind, p.label, p.name)
		}
	}
	return nil
}
