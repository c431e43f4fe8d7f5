package routingpolicy

import (
	"sync"

	"github.com/coresteer/coresteer/plugin/pkg/udpanswer"
	"github.com/miekg/dns"
)

// reply is the answer a lookup decided, by reference to the records of the zone: ServeDNS copies
// it as packed bytes (wire.go) or makes a dns.Msg of it (msg). Both write the same message.
type reply struct {
	rcode    int
	referral bool // a referral: not authoritative, unless an in-zone CNAME came before it
	n        int  // how many policies answered: the lookup's used[:n]
	an       []part
	ns       *packed
	extra    *packed
	// nsDO is the authority section of a referral for a query with the DO bit: the cut's NS and
	// DS sets (RFC 4035 3.1.4), when the cut has a DS set.
	nsDO *packed
	// out is set when the answer ends with a CNAME (or a DNAME's synthesized CNAME) to a name
	// outside the zone: ServeDNS looks that name up through the server, as file does (chase.go).
	out bool
	// restarts counts the fresh lookups of the answer's CNAME chain, file's count through the
	// server (dnsserver.LoopKey), from the count the query came with.
	restarts int
	// tc is set when the records a chase added were cut short (the lookup through the server
	// truncated them to the client's size): the answer is truncated too (TC, RFC 2181 9).
	tc bool
	// ecs is the client-subnet option with the scope of the records a chase added (chase.go),
	// when the lookup through the server gave one (L-1, RFC 7871 7.2.1).
	ecs *dns.EDNS0_SUBNET
}

// part is a run of the answer section: records of the zone, or one record made for this query.
type part struct {
	p *packed
	// owner, when set, owns the records of p instead of their own name: they are synthesized from
	// a wildcard (RFC 4592 3.3.1).
	owner string
	// rr, when set, is the record, made for this query: the CNAME of a DNAME substitution (RFC
	// 6672), ANY's HINFO (RFC 8482).
	rr dns.RR
}

// scratch is the memory of one query's answer that does not fit on the stack: the parts of its
// answer section (a lookup appends to them through a pointer, which the compiler cannot keep on
// the stack) and the buffer it is packed into. ServeDNS takes one from scratches and gives it
// back when it has written the answer.
//
// It also holds what would otherwise be ServeDNS's largest locals (rep, used) and the UDP writer
// of a packed answer: miekg/dns serves each query on a goroutine of its own, whose stack grows
// (and is copied) when a call needs more than it has; the smaller ServeDNS's frame, the deeper
// the send below it can go before that happens.
type scratch struct {
	an     []part
	buf    []byte
	rep    reply            // the answer (lookup), its parts in an
	used   [maxUsed]used    // the policies that answered (lookup)
	direct udpanswer.Direct // the UDP writer of a packed answer (writePacked)
}

var scratches = sync.Pool{New: func() any {
	return &scratch{an: make([]part, 0, 8), buf: make([]byte, 0, dns.MinMsgSize)}
}}

// Beyond these sizes, rare, a query's memory is left to the garbage collector.
const (
	maxPooledParts = 256
	maxPooledBuf   = 4096
)

// put gives sc back with an and buf, the memory it lent, maybe grown.
func (sc *scratch) put(an []part, buf []byte) {
	if cap(an) <= maxPooledParts && cap(buf) <= maxPooledBuf {
		clear(an) // no references into data a reload may drop
		clear(sc.used[:])
		sc.rep = reply{}
		sc.an, sc.buf = an[:0], buf[:0]
		scratches.Put(sc)
	}
}

// authoritative reports whether the answer has AA set: all but a referral, which is
// authoritative only for the CNAMEs before it.
func (rep *reply) authoritative() bool { return !rep.referral || len(rep.an) > 0 }

// msg returns rep as the reply to r.
func (rep *reply) msg(r *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = rep.authoritative()
	m.Rcode = rep.rcode
	m.Truncated = rep.tc
	n := 0
	for i := range rep.an {
		if rep.an[i].rr != nil {
			n++
		} else {
			n += len(rep.an[i].p.rrs)
		}
	}
	if n > 0 {
		// A slice of its own: a plugin before us may change the answer section in place.
		m.Answer = make([]dns.RR, 0, n)
		for i := range rep.an {
			switch pt := &rep.an[i]; {
			case pt.rr != nil:
				m.Answer = append(m.Answer, pt.rr)
			case pt.owner != "":
				for _, rr := range pt.p.rrs {
					m.Answer = append(m.Answer, renamed(rr, pt.owner))
				}
			default:
				m.Answer = append(m.Answer, pt.p.rrs...)
			}
		}
	}
	// The zone's slices, clipped: a plugin that appends to them copies.
	if rep.ns != nil {
		m.Ns = rep.ns.rrs
	}
	if rep.extra != nil {
		m.Extra = rep.extra.rrs
	}
	return m
}

// renamed returns a copy of rr owned by name.
func renamed(rr dns.RR, name string) dns.RR {
	switch v := rr.(type) {
	case *dns.A:
		c := *v
		c.Hdr.Name = name
		return &c
	case *dns.AAAA:
		c := *v
		c.Hdr.Name = name
		return &c
	case *dns.CNAME:
		c := *v
		c.Hdr.Name = name
		return &c
	}
	c := dns.Copy(rr)
	c.Header().Name = name
	return c
}
