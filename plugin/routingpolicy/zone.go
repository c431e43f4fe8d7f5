package routingpolicy

import (
	"github.com/coredns/coredns/plugin"

	"github.com/miekg/dns"
)

// zone is the data of one origin, built at load time and never modified afterwards: the query
// path reads it without locks.
type zone struct {
	origin string
	soa    []dns.RR // the SOA, alone, capacity clipped so appends by later plugins copy
	ns     []dns.RR // the apex NS set, clipped the same way
	names  map[string]*node
	// ents are the empty non-terminals: names with nothing of their own but names below them,
	// which answer NODATA, not NXDOMAIN.
	ents map[string]bool
	// negTTL is the TTL of the SOA in negative answers (RFC 2308: min of its TTL and MINIMUM).
	negTTL uint32
}

// node is everything at one owner name.
type node struct {
	sets []rrset
}

// rrset is one type at a name: plain records or a policy.
type rrset struct {
	qtype uint16
	rrs   []dns.RR // plain records
	pol   *policy
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

// data is one loaded version of a routingpolicy block: every zone with its record sets and every
// policy. A reload builds a new one and swaps it in atomically.
type data struct {
	zones    []*zone
	origins  plugin.Zones
	byOrigin map[string]*zone
	policies []*policy
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
	return len(name) == len(origin) || name[len(name)-len(origin)-1] == '.'
}
