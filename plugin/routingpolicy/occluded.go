package routingpolicy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// maxOccludedNamed is how many hidden record sets one line of occludedWarnings names, and
// maxOccludedLines how many zone cuts and DNAMEs of a zone get a line of their own.
const (
	maxOccludedNamed = 5
	maxOccludedLines = 10
)

// occludedWarnings returns the warnings, a line per zone cut or DNAME (ten a zone at most, then a
// count), of the record sets that no query is answered from (R-ZONE-2): at or below a cut, where
// a referral answers, all but the cut's NS and DS sets and what is served as glue or additional
// data (the addresses of name servers, of MX and SRV targets); below a DNAME owner, all but what
// is served as additional data (RFC 6672 2.3: nothing may exist there; a query is substituted).
// They load and are hidden, as in file, which says nothing. Empty where nothing is hidden.
func (d *data) occludedWarnings() []string {
	var served map[string]bool // owner and type of the records served as glue or additional data
	mark := func(p packed) {
		for _, rr := range p.rrs {
			served[rr.Header().Name+" "+dns.Type(rr.Header().Rrtype).String()] = true
		}
	}
	var out []string
	for _, z := range d.zones {
		guarded := false
		for _, n := range z.names {
			guarded = guarded || n.guard != nil || n.cut != nil
		}
		if !guarded {
			continue
		}
		if served == nil {
			served = map[string]bool{}
			for _, z := range d.zones {
				z.eachExtra(mark)
			}
		}
		out = append(out, z.occludedWarnings(served)...)
	}
	return out
}

// eachExtra calls f with every set of records the zone serves as glue or additional data: the
// apex NS set's glue, each zone cut's glue (a cut below a cut or a DNAME is never asked), and
// the additional data of the record sets that are answered (not those at or below a cut or a
// DNAME).
func (z *zone) eachExtra(f func(packed)) {
	f(z.nsGlue)
	for _, n := range z.names {
		if n.guard != nil {
			continue
		}
		if n.cut != nil {
			f(n.cut.glue)
			continue
		}
		for i := range n.sets {
			f(n.sets[i].extra)
			for q := n.sets[i].pol; q != nil; q = q.backup {
				for j := range q.items {
					f(q.items[j].extra)
				}
			}
		}
	}
}

func (z *zone) occludedWarnings(served map[string]bool) []string {
	hidden := map[*node][]string{}
	var guards []*node
	for name, n := range z.names {
		g := n.guard
		if g == nil && n.cut != nil {
			g = n
		}
		if g == nil {
			continue
		}
		for _, s := range n.sets {
			set := name + " " + dns.Type(s.qtype).String()
			if served[set] || n == g && (s.qtype == dns.TypeNS || s.qtype == dns.TypeDS) {
				continue
			}
			if hidden[g] == nil {
				guards = append(guards, g)
			}
			hidden[g] = append(hidden[g], set)
		}
	}
	slices.SortFunc(guards, func(a, b *node) int { return strings.Compare(a.name, b.name) })
	var out []string
	for i, g := range guards {
		sets := hidden[g]
		slices.Sort(sets)
		if i == maxOccludedLines {
			total := 0
			for _, g := range guards[i:] {
				total += len(hidden[g])
			}
			out = append(out, fmt.Sprintf("Zone %s: %d more zone cuts or DNAMEs hide %d record sets, never answered", z.origin, len(guards)-i, total))
			break
		}
		named, more := sets, ""
		if len(sets) > maxOccludedNamed {
			named, more = sets[:maxOccludedNamed], fmt.Sprintf(" and %d more", len(sets)-maxOccludedNamed)
		}
		count := fmt.Sprintf("%d record sets are", len(sets))
		if len(sets) == 1 {
			count = "1 record set is"
		}
		if g.cut != nil {
			out = append(out, fmt.Sprintf("Zone %s: %s at or below the zone cut %s and never answered (a referral is; only glue and additional data serve): %s%s",
				z.origin, count, g.name, strings.Join(named, ", "), more))
		} else {
			out = append(out, fmt.Sprintf("Zone %s: %s below the DNAME at %s and never answered (queries there are substituted; RFC 6672 2.3): %s%s",
				z.origin, count, g.name, strings.Join(named, ", "), more))
		}
	}
	return out
}

// logOccluded logs the warnings of occludedWarnings, when d is what the block serves.
func (d *data) logOccluded() {
	for _, w := range d.occluded {
		log.Warning(w)
	}
}
