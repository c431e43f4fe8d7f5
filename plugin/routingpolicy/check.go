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

// checkLoops refuses CNAME and DNAME chains that loop (R-ZONE-3), following every target a
// policy can answer, wildcards and DNAME substitutions included, as the lookup would. A chain
// that ends loads however long it is, as in file; the lookup answers as much of it as file
// would (maxChain). In a loop of CNAMEs a name comes back; in a loop of DNAMEs the name may grow
// instead (x.d → x.a.e → x.a.d → …, until it is too long): a run of substitutions that comes
// back under a DNAME it passed is such a loop, since every name below that DNAME takes the same
// way round.
func (z *zone) checkLoops() error {
	const (
		onPath = 1
		done   = 2
	)
	state := map[string]uint8{}
	var (
		path []string
		by   []*node // by[i]: the DNAME that substituted path[i], or nil
	)
	var visit func(name string, run int) error
	// run is the index in path where the current run of substitutions starts.
	visit = func(name string, run int) error {
		switch state[name] {
		case onPath:
			i := slices.Index(path, name)
			kind := "CNAME"
			switch n := countDNAMEs(by[i:]); {
			case n == len(by[i:]):
				kind = "DNAME"
			case n > 0:
				kind = "CNAME and DNAME"
			}
			return fmt.Errorf("%s loop: %s → %s", kind, strings.Join(path[i:], " → "), name)
		case done:
			return nil
		}
		targets, d := z.next(name)
		if d != nil {
			if i := slices.Index(by[run:], d); i >= 0 {
				return fmt.Errorf("DNAME loop: %s → %s → …: every name below %s is substituted back below it, longer each time",
					strings.Join(path[run+i:], " → "), name, d.name)
			}
		}
		state[name] = onPath
		path = append(path, name)
		by = append(by, d)
		for _, t := range targets {
			next := len(path) // a CNAME ends the run
			if d != nil {
				next = run
			}
			if err := visit(t, next); err != nil {
				return err
			}
		}
		path, by = path[:len(path)-1], by[:len(by)-1]
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
		if err := visit(start, len(path)); err != nil {
			return err
		}
	}
	return nil
}

// next returns the names of the zone (z.holds) a lookup of name goes on with: every target of
// its CNAME set (every item of a policy), or the DNAME substitution, with the node of the DNAME.
func (z *zone) next(name string) ([]string, *node) {
	n, how := z.locate(name, dns.TypeA)
	switch how {
	case substitute:
		if t, ok := substitute6672(name, n.name, n.dtarget); ok && z.holds(t) {
			return []string{t}, n
		}
		return nil, nil
	case exact, wildcard:
	default:
		return nil, nil
	}
	s := n.find(dns.TypeCNAME)
	if s == nil {
		return nil, nil
	}
	var out []string
	add := func(rr dns.RR) {
		if t := canonicalName(rr.(*dns.CNAME).Target); z.holds(t) {
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
	return out, nil
}

// countDNAMEs counts the substitutions among the steps of a chain.
func countDNAMEs(by []*node) int {
	n := 0
	for _, d := range by {
		if d != nil {
			n++
		}
	}
	return n
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
