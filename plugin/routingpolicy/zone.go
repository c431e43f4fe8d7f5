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

// match returns the zone qname belongs to, or nil.
func (d *data) match(qname string) *zone {
	o := d.origins.Matches(qname)
	if o == "" {
		return nil
	}
	return d.byOrigin[o]
}
