package routingpolicy

import (
	"github.com/miekg/dns"
)

// zone is the data of one origin, built at load time and never modified afterwards: the query
// path reads it without locks.
type zone struct {
	origin string
	apex   *node
	soa    packed // the SOA with the negative TTL, alone, capacity clipped so appends by later plugins copy
	ns     packed // the apex NS set, clipped the same way
	nsGlue packed // the in-zone addresses of the apex name servers, for an apex NS answer
	// names holds every name that exists (RFC 4592 2.2.2): names with records, empty
	// non-terminals (nodes without sets, which answer NODATA, not NXDOMAIN), and names below zone
	// cuts, whose data is occluded but serves as glue.
	names map[string]*node
	// negTTL is the TTL of the SOA in negative answers (RFC 2308: min of its TTL and MINIMUM).
	negTTL uint32
	// inner are the origins of the block's other zones below this one: their names are not this
	// zone's (a record belongs to the longest zone that contains it).
	inner []string
}

// holds reports whether name (canonical) is answered by this zone: in it, and in none of the
// block's zones below it. A CNAME chain that leads elsewhere is completed through the server.
func (z *zone) holds(name string) bool {
	if !inZone(name, z.origin) {
		return false
	}
	for _, o := range z.inner {
		if inZone(name, o) {
			return false
		}
	}
	return true
}

// node is everything at one owner name, with what the lookup needs precomputed at load time.
type node struct {
	name string
	sets []rrset
	// guard is the topmost strict ancestor that is a zone cut or owns a DNAME: a name under it
	// is answered by a referral (RFC 1034 4.3.2 3b) or a DNAME substitution (RFC 6672 3.2), never
	// from its own data.
	guard  *node
	cut    *referral  // set when the node is a zone cut: NS records below the apex
	dname  *dns.DNAME // the DNAME owned here, its target as written (file answers it so)
	dnameP packed     // dname, packed
	// dtarget is the DNAME's target in canonical form, for substitutions that are looked up.
	dtarget string
	wild    *node // the node "*.<name>": the source of synthesis below this closest encloser
}

// referral is what a zone cut answers: its NS set in authority and the addresses of the name
// servers below it (glue) in additional (RFC 1034 4.3.2 3b).
type referral struct {
	ns   packed
	glue packed
	// nsDS is the authority of a referral for a query with the DO bit: the NS set, then the DS
	// set of the cut when it has one, as file writes it (RFC 4035 3.1.4: a signed parent's
	// referral carries the DS, which the dnssec plugin signs). Empty without a DS set.
	nsDS packed
}

// rrset is one type at a name: plain records or a policy.
type rrset struct {
	qtype uint16
	rrs   []dns.RR // plain records
	ans   packed   // rrs, packed: the answer
	pol   *policy
	// extra are the in-zone addresses of the targets of plain MX, SRV, SVCB and HTTPS records,
	// for the additional section (as file does).
	extra packed
	// target is the target of a plain CNAME set (one record), canonical, for the chase.
	target string
}

func (n *node) find(qtype uint16) *rrset {
	for i := range n.sets {
		if n.sets[i].qtype == qtype {
			return &n.sets[i]
		}
	}
	return nil
}

func (n *node) add(s rrset) { n.sets = append(n.sets, s) }

// plain returns the plain records of type qtype at n.
func (n *node) plain(qtype uint16) []dns.RR {
	if s := n.find(qtype); s != nil {
		return s.rrs
	}
	return nil
}

// data is one loaded version of a routingpolicy block: every zone with its record sets and every
// policy. A reload builds a new one and swaps it in atomically.
type data struct {
	zones    []*zone
	policies []*policy
	stamps   [2]fileStamp // of the zone file and record-set file it was read from (Config.load)
	occluded []string     // warnings of the data that zone cuts and DNAMEs hide, logged once d is served
}

// match returns the zone qname (lower case, fully qualified) belongs to, the longest origin
// winning, or nil. It compares suffixes on label boundaries and does not allocate.
func (d *data) match(qname string) *zone {
	var best *zone
	for _, z := range d.zones {
		o := z.origin
		if !inZone(qname, o) {
			continue
		}
		if best == nil || len(o) > len(best.origin) {
			best = z
		}
	}
	return best
}

// inZone reports whether name is origin or below it; both lower case and fully qualified.
func inZone(name, origin string) bool {
	if origin == "." {
		return true
	}
	if len(name) < len(origin) || name[len(name)-len(origin):] != origin {
		return false
	}
	if len(name) == len(origin) {
		return true
	}
	// The dot before origin must end a label: not escaped (`a\.example.org.` is one label
	// "a.example" under "org."), so not preceded by an odd number of backslashes.
	i := len(name) - len(origin) - 1
	if name[i] != '.' {
		return false
	}
	j := i
	for j > 0 && name[j-1] == '\\' {
		j--
	}
	return (i-j)%2 == 0
}

// parent returns the name one label up; ok is false for the root.
func parent(name string) (p string, ok bool) {
	if name == "." || name == "" {
		return "", false
	}
	i, end := dns.NextLabel(name, 0)
	if end {
		return ".", true
	}
	return name[i:], true
}

// encloser returns the closest encloser of name, which does not exist: its longest existing
// ancestor (RFC 4592 3.3.1). name is in the zone, so the apex ends the walk.
func (z *zone) encloser(name string) *node {
	for {
		p, ok := parent(name)
		if !ok || len(p) < len(z.origin) {
			return z.apex
		}
		if n := z.names[p]; n != nil {
			return n
		}
		name = p
	}
}

// how a lookup step found what answers a name.
type found uint8

const (
	nxdomain   found = iota
	exact            // the name's own node
	wildcard         // the wildcard that synthesizes the name (RFC 4592)
	delegation       // a zone cut at or above the name: a referral
	substitute       // a DNAME above the name (RFC 6672)
)

// locate finds what answers name (lower case, in the zone) for qtype: the name itself, a zone
// cut or DNAME above it, the wildcard of its closest encloser, or nothing. It is the one place
// that decides this, for queries and for the load-time loop check alike.
func (z *zone) locate(name string, qtype uint16) (*node, found) {
	n := z.names[name]
	if n != nil {
		if g := n.guard; g != nil {
			return g, guardKind(g)
		}
		// The cut itself answers DS from this zone, the parent (RFC 4035 3.1.4.1).
		if n.cut != nil && qtype != dns.TypeDS {
			return n, delegation
		}
		return n, exact
	}
	ce := z.encloser(name)
	if g := ce.guard; g != nil {
		return g, guardKind(g)
	}
	if ce.cut != nil || ce.dname != nil {
		return ce, guardKind(ce)
	}
	if ce.wild != nil {
		return ce.wild, wildcard
	}
	return nil, nxdomain
}

func guardKind(g *node) found {
	if g.dname != nil {
		return substitute
	}
	return delegation
}
