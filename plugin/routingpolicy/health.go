package routingpolicy

import (
	"fmt"
	"sort"

	"github.com/coresteer/coresteer/plugin/pkg/health"
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

// wanted returns the (check, address) pairs d wants probed.
func (d *data) wanted() []health.Key {
	var out []health.Key
	for _, p := range d.policies {
		p.each(func(a *addr) {
			if a.explicit {
				out = append(out, a.key)
			}
		})
	}
	return out
}

// acquire resolves every address of d to its board target: Key{CHECK, ADDR} for an address its
// record set checks, Key{"", ADDR} for the others, which count as checked when a load-balancer
// VIP or a pschealth destination publishes them.
//
// An address whose record set names a check is also asked of that check's prober, so an address
// that a file reload adds is probed as the ones known when the Corefile loaded were (those are
// probed already: asking again only adds a reference, H-3).
func (d *data) acquire(b *health.Board) {
	for _, p := range d.policies {
		p.each(func(a *addr) {
			if a.hasKey {
				a.t = b.Acquire(a.key)
			}
			if a.explicit {
				a.unprobe, _ = b.Probe(a.key)
			}
		})
	}
}

// release gives back what acquire took.
func (d *data) release(b *health.Board) {
	for _, p := range d.policies {
		p.each(func(a *addr) {
			if a.unprobe != nil {
				a.unprobe()
			}
			if a.t != nil {
				b.Release(a.t)
			}
		})
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
