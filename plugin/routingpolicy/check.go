package routingpolicy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// checkNames checks what may stand at each name (R-ZONE-3): a CNAME alone and not at the apex
// (RFC 1034 3.6.2), a DNAME not beside a zone cut and not pointing below itself (RFC 6672 2.3,
// 2.4), and no NS or DNAME at a wildcard, whose meaning RFC 4592 4.2 and 4.4 leave undefined.
func (z *zone) checkNames() error {
	for _, name := range sortedNames(z) {
		n := z.names[name]
		if n.find(dns.TypeCNAME) != nil && len(n.sets) > 1 {
			return fmt.Errorf("%s has a CNAME and other data (RFC 1034 3.6.2)", name)
		}
		if name == z.origin && n.find(dns.TypeCNAME) != nil {
			return fmt.Errorf("CNAME at the zone apex %s", name)
		}
		wild := strings.HasPrefix(name, "*.")
		if d := n.plain(dns.TypeDNAME); d != nil {
			t := canonicalName(d[0].(*dns.DNAME).Target)
			switch {
			case wild:
				return fmt.Errorf("DNAME at the wildcard %s: not supported (RFC 4592 4.4)", name)
			case name != z.origin && n.find(dns.TypeNS) != nil:
				return fmt.Errorf("%s has a DNAME and NS records: a DNAME cannot be at a zone cut (RFC 6672 2.3)", name)
			case inZone(t, name):
				return fmt.Errorf("DNAME %s → %s points at or below itself: every substitution loops (RFC 6672 2.2)", name, t)
			}
		}
		if wild && n.find(dns.TypeNS) != nil {
			return fmt.Errorf("NS records at the wildcard %s: a wildcard cannot be a zone cut (RFC 4592 4.2)", name)
		}
	}
	return nil
}

// checkPolicies refuses a policy that the lookup would never answer: at or under a zone cut,
// where a referral answers (R-ZONE-2), or under a DNAME, which substitutes the name.
func (z *zone) checkPolicies() error {
	for _, name := range sortedNames(z) {
		n := z.names[name]
		for i := range n.sets {
			p := n.sets[i].pol
			if p == nil {
				continue
			}
			switch g := n.guard; {
			case g != nil && g.cut != nil:
				return fmt.Errorf("%s %s: the name is under the zone cut %s (delegated: a referral answers, not the policy)", p.kind, p.label, g.name)
			case g != nil:
				return fmt.Errorf("%s %s: the name is under the DNAME %s (substituted: the policy would never answer)", p.kind, p.label, g.name)
			case n.cut != nil:
				return fmt.Errorf("%s %s: the name is the zone cut %s (delegated: a referral answers, not the policy)", p.kind, p.label, n.name)
			}
		}
	}
	return nil
}

// maxLoopSteps bounds the walk of one chain at load: a chain of DNAMEs can lengthen the name at
// every step without repeating one.
const maxLoopSteps = 64

// checkLoops refuses CNAME and DNAME chains that loop (R-ZONE-3), following every target a
// policy can answer, wildcards and DNAME substitutions included, as the lookup would.
func (z *zone) checkLoops() error {
	const (
		onPath = 1
		done   = 2
	)
	state := map[string]uint8{}
	var path []string
	var visit func(name string) error
	visit = func(name string) error {
		switch state[name] {
		case onPath:
			i := slices.Index(path, name)
			return fmt.Errorf("CNAME loop: %s → %s", strings.Join(path[i:], " → "), name)
		case done:
			return nil
		}
		if len(path) >= maxLoopSteps {
			return fmt.Errorf("CNAME/DNAME chain longer than %d steps (a loop through DNAME substitution) starting %s", maxLoopSteps, strings.Join(path[:4], " → "))
		}
		state[name] = onPath
		path = append(path, name)
		for _, t := range z.next(name) {
			if err := visit(t); err != nil {
				return err
			}
		}
		path = path[:len(path)-1]
		state[name] = done
		return nil
	}
	for _, name := range sortedNames(z) {
		n := z.names[name]
		start := ""
		switch {
		case n.find(dns.TypeCNAME) != nil:
			start = name
		case n.dname != nil:
			// Any name below the owner is substituted the same way; take the shortest, so an
			// owner of up to 253 octets still has one (a longer name may be too long to
			// substitute where a short one loops). An owner with no name below it loops nothing.
			start = "x." + name
			if name == "." {
				start = "x."
			}
			if wireLen(start) > maxNameLen {
				continue
			}
		}
		if start == "" {
			continue
		}
		if err := visit(start); err != nil {
			return err
		}
	}
	return nil
}

// next returns the in-zone names a lookup of name goes on with: every target of its CNAME set
// (every item of a policy), or the DNAME substitution.
func (z *zone) next(name string) []string {
	n, how := z.locate(name, dns.TypeA)
	switch how {
	case substitute:
		if t, ok := substitute6672(name, n.name, n.dtarget); ok && inZone(t, z.origin) {
			return []string{t}
		}
		return nil
	case exact, wildcard:
	default:
		return nil
	}
	s := n.find(dns.TypeCNAME)
	if s == nil {
		return nil
	}
	var out []string
	add := func(rr dns.RR) {
		if t := rr.(*dns.CNAME).Target; inZone(t, z.origin) {
			out = append(out, t)
		}
	}
	for _, rr := range s.rrs {
		add(rr)
	}
	for q := s.pol; q != nil; q = q.backup {
		for i := range q.items {
			for j := range q.items[i].addrs {
				add(q.items[i].addrs[j].rr)
			}
		}
	}
	return out
}

// sortedNames returns the names of z in a fixed order, so the error a zone gets does not
// depend on map order.
func sortedNames(z *zone) []string {
	names := make([]string, 0, len(z.names))
	for n := range z.names {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
