package routingpolicy

import (
	"github.com/coresteer/coresteer/plugin/pkg/region"

	"github.com/miekg/dns"
)

// used is one policy that contributed to an answer, and what it decided.
type used struct {
	p *policy
	o outcome
}

// source locates the query lazily: only geo and failover policies need the region, and only
// answers that used it carry an ECS scope (RFC 7871).
type source struct {
	loc    *region.Locator
	w      dns.ResponseWriter
	r      *dns.Msg
	public bool

	done bool
	id   region.ID
	src  region.Source
}

func (s *source) region() region.ID {
	if !s.done {
		s.done = true
		s.id, s.src = s.loc.Locate(s.w.RemoteAddr(), s.r, s.public)
	}
	return s.id
}

// result is the outcome of a lookup: the rcode and how many policies answered.
type result struct {
	rcode int
	n     int
}

// lookup fills m with the authoritative answer for qname/qtype: the records (in-zone CNAMEs
// chased), NS in authority for positive answers, the SOA for negative ones.
func (z *zone) lookup(m *dns.Msg, qname string, qtype uint16, src *source, rnd func() uint64, us *[maxChase]used) result {
	res := result{rcode: dns.RcodeSuccess}
	name := qname
	for range maxChase {
		n := z.names[name]
		if n == nil {
			if z.ents[name] {
				m.Ns = z.soa // NODATA at an empty non-terminal
				return res
			}
			// The name (or the target of a CNAME) does not exist (RFC 6604: the rcode is that
			// of the last name).
			res.rcode = dns.RcodeNameError
			m.Ns = z.soa
			return res
		}
		if qtype == dns.TypeANY {
			// RFC 8482: answer ANY with one synthesized HINFO instead of every record set.
			m.Answer = append(m.Answer, &dns.HINFO{
				Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeHINFO, Class: dns.ClassINET, Ttl: z.negTTL},
				Cpu: "RFC8482",
			})
			return res
		}
		s := n.find(qtype)
		if s == nil && qtype != dns.TypeCNAME {
			s = n.find(dns.TypeCNAME)
		}
		if s == nil {
			m.Ns = z.soa // NODATA
			return res
		}
		start := len(m.Answer)
		if s.pol != nil {
			if m.Answer == nil {
				m.Answer = make([]dns.RR, 0, s.pol.maxRRs()+1)
			}
			var o outcome
			m.Answer, o = s.pol.answer(m.Answer, src, rnd)
			us[res.n] = used{p: s.pol, o: o}
			res.n++
		} else {
			if m.Answer == nil {
				m.Answer = make([]dns.RR, 0, len(s.rrs))
			}
			m.Answer = append(m.Answer, s.rrs...)
		}
		if s.qtype != dns.TypeCNAME || qtype == dns.TypeCNAME {
			m.Ns = z.ns
			return res
		}
		// Chase an in-zone CNAME; an out-of-zone target is left to the resolver.
		target := ""
		if len(m.Answer) > start {
			if c, ok := m.Answer[len(m.Answer)-1].(*dns.CNAME); ok {
				target = lower(c.Target)
			}
		}
		if target == "" || !inZone(target, z.origin) {
			return res
		}
		name = target
	}
	return res
}

// maxRRs is the largest number of records one answer of p can carry.
func (p *policy) maxRRs() int {
	n := 0
	for q := p; q != nil; q = q.backup {
		for i := range q.items {
			n = max(n, len(q.items[i].addrs))
		}
	}
	return n
}

// lower returns s in lower case, without allocating when it already is.
func lower(s string) string {
	for i := range len(s) {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if c := b[j]; 'A' <= c && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
