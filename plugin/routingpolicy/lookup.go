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

// maxChain and maxRestarts are how far file follows a CNAME chain (plugin/file lookup.go), kept
// so a zone moved from file answers the same (R-ZONE-1). file follows at most 10 CNAMEs through
// names its tree holds, then answers NOERROR with the apex NS set (a referral when the next name
// is under a cut). A name it does not hold (one a wildcard or a DNAME answers, an empty
// non-terminal, a name that does not exist), and every name of an NS query, it looks up afresh
// through the server, which starts the count again; the 9th fresh lookup is SERVFAIL.
const (
	maxChain    = 10
	maxRestarts = 8
)

// maxUsed is how many policies of one chain are accounted for (metrics, metadata, logs).
const maxUsed = maxChain

// lookup fills rep with the answer for qname/qtype, as CoreDNS's file plugin does (R-ZONE-1):
// the records, in-zone CNAMEs and DNAMEs chased as far as file does (maxChain, maxRestarts), NS
// in authority for positive answers and the SOA for negative ones, referrals with glue at zone
// cuts, wildcards synthesized (R-ZONE-2), and the addresses of in-zone MX/SRV targets in
// additional. The policies that answered are in us[:rep.n].
func (z *zone) lookup(rep *reply, qname string, qtype uint16, src *source, rnd func() uint64, us *[maxUsed]used) {
	rep.rcode = dns.RcodeSuccess
	if qname == z.origin && qtype == dns.TypeNS {
		// As file: the apex NS set with the in-zone addresses of its servers, no authority.
		rep.an, rep.extra = append(rep.an, part{p: &z.ns}), &z.nsGlue
		return
	}
	name := qname
	chain := 0 // CNAMEs since file's last fresh lookup; rep.restarts counts the fresh lookups
	for step := 0; ; step++ {
		n, how := z.locate(name, qtype)
		if step > 0 && how != delegation {
			if how != exact || !z.held(n) || qtype == dns.TypeNS || qtype == dns.TypeSOA && name == z.origin {
				// file looks this name up afresh.
				// file answers its apex SOA and NS before it counts (file's Lookup).
				apex := name == z.origin && (qtype == dns.TypeNS || qtype == dns.TypeSOA)
				if rep.restarts++; rep.restarts > maxRestarts && !apex {
					rep.rcode = dns.RcodeServerFailure
					rep.ns = &z.ns
					return
				}
				chain = 0
			} else if chain == maxChain {
				rep.ns = &z.ns // the resolver goes on from here
				return
			}
		}
		switch how {
		case nxdomain:
			// RFC 6604: the rcode is that of the last name of a CNAME chain.
			rep.rcode = dns.RcodeNameError
			rep.ns = &z.soa
			return
		case delegation:
			// R-ZONE-2, RFC 1034 4.3.2 3b: a referral. For a DO query it carries the cut's DS
			// set too (RFC 4035 3.1.4), which ServeDNS chooses (nsDO).
			rep.ns, rep.extra = &n.cut.ns, &n.cut.glue
			if len(n.cut.nsDS.rrs) > len(n.cut.ns.rrs) {
				rep.nsDO = &n.cut.nsDS
			}
			rep.referral = true
			return
		case substitute:
			target, ok := substitute6672(name, n.name, n.dtarget)
			rep.an = append(rep.an, part{p: &n.dnameP})
			if !ok {
				// RFC 6672 2.2: the substituted name is too long.
				rep.rcode = dns.RcodeYXDomain
				return
			}
			// The synthesized target keeps the DNAME target's case, as file's does; the chase
			// goes on with the canonical name.
			written := target
			if n.dname.Target != n.dtarget {
				written, _ = substitute6672(name, n.name, n.dname.Target)
			}
			rep.an = append(rep.an, part{rr: &dns.CNAME{
				Hdr:    dns.RR_Header{Name: name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: n.dname.Hdr.Ttl},
				Target: written,
			}})
			if qtype == dns.TypeCNAME || !z.holds(target) {
				rep.ns = &z.ns
				rep.out = qtype != dns.TypeCNAME // the target is looked up through the server (chase.go)
				return
			}
			name = target
			chain++
			continue
		}
		if len(n.sets) == 0 {
			rep.ns = &z.soa // NODATA at an empty non-terminal (or a wildcard that is one)
			return
		}
		if qtype == dns.TypeANY {
			// RFC 8482: answer ANY with one synthesized HINFO instead of every record set.
			rep.an = append(rep.an, part{rr: &dns.HINFO{
				Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeHINFO, Class: dns.ClassINET, Ttl: z.negTTL},
				Cpu: "RFC8482",
			}})
			return
		}
		s := n.find(qtype)
		if s == nil && qtype != dns.TypeCNAME {
			s = n.find(dns.TypeCNAME)
		}
		if s == nil {
			rep.ns = &z.soa // NODATA
			return
		}
		start := len(rep.an)
		extra, target := &s.extra, s.target
		if s.pol != nil {
			var o outcome
			rep.an, o = s.pol.answer(rep.an, src, rnd)
			if rep.n < len(us) {
				us[rep.n] = used{p: s.pol, o: o}
				rep.n++
			}
			extra, target = &o.it.extra, o.it.target
		} else {
			rep.an = append(rep.an, part{p: &s.ans})
		}
		if how == wildcard {
			// RFC 4592 3.3.1: the synthesized records are owned by the query name.
			for i := start; i < len(rep.an); i++ {
				rep.an[i].owner = name
			}
		}
		if s.qtype != dns.TypeCNAME || qtype == dns.TypeCNAME {
			rep.ns, rep.extra = &z.ns, extra
			return
		}
		// Chase an in-zone CNAME; a target outside the zone (or in a zone of the block below it)
		// is looked up through the server, as file does (ServeDNS, chase.go).
		if target == "" || !z.holds(target) {
			rep.ns = &z.ns
			rep.out = target != ""
			return
		}
		name = target
		chain++
	}
}

// held reports whether file's tree holds n: a name with records other than the apex SOA and NS,
// which file keeps apart (an empty non-terminal is not held either).
func (z *zone) held(n *node) bool {
	if n == z.apex {
		return len(n.sets) > 2
	}
	return len(n.sets) > 0
}

// substitute6672 replaces the suffix owner of name, which is below it, with target (RFC 6672
// 2.2). ok is false when the result is longer than a domain name may be.
func substitute6672(name, owner, target string) (string, bool) {
	prefix := name[:len(name)-len(owner)] // ends in a dot
	if owner == "." {
		prefix = name
	}
	out := prefix + target
	if target == "." {
		out = prefix
	}
	if wireLen(out) > maxNameLen {
		return "", false
	}
	return out, true
}
