package routingpolicy

import (
	"context"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin/pkg/upstream"
	"github.com/coredns/coredns/request"

	"github.com/miekg/dns"
)

// loopCount is how many times the query has come back through the server for a CNAME chain
// (dnsserver.LoopKey): file's count, which a lookup through the server (chase) raises by one.
func loopCount(ctx context.Context) int {
	n, _ := ctx.Value(dnsserver.LoopKey{}).(int)
	return n
}

// chase completes rep, whose answer ends with a CNAME to a name outside the zone (rep.out), as
// file does (R-ZONE-1; plugin/file lookup.go externalLookup and doLookup): it looks the target
// up through the server, the whole chain of the server block again (another zone of this block,
// a file zone, forward, outbound ...), and appends that answer. The rcode is the lookup's
// (RFC 6604 3): NXDOMAIN with the SOA in authority, SERVFAIL, and NODATA (NOERROR, no answer) with
// the SOA; anything else, the REFUSED of a name no zone of the server holds included, keeps
// NOERROR and the CNAME is the answer, for the resolver to follow. Outside a server (the handler
// called directly, as tests do) the CNAME is the answer.
func chase(ctx context.Context, state *request.Request, rep *reply, z *zone) {
	var target string
	if last := lastRecord(rep); last != nil {
		if c, ok := last.(*dns.CNAME); ok {
			target = c.Target // as written, as file asks for it
		}
	}
	if target == "" {
		return
	}
	ctx = context.WithValue(ctx, dnsserver.LoopKey{}, rep.restarts+1)
	m, err := upstream.New().Lookup(ctx, *state, target, state.QType())
	switch {
	case err != nil:
		return // no server: the CNAME is the answer
	case m == nil:
		return
	}
	for _, rr := range m.Answer {
		rep.an = append(rep.an, part{rr: rr})
	}
	// The records found may depend on the client's subnet (a geo policy of another zone of the
	// block, an upstream that honours ECS): their scope is the answer's (L-1).
	rep.ecs = subnetScope(m)
	// The lookup went out with the client's size: what it cut off is missing here too, and a
	// resolver must not cache the partial set as whole (RFC 2181 9). file drops the bit.
	// miekg/dns's Truncate keeps the answer section first: a record left in authority or
	// additional shows the answer is whole (only those sections, which are not copied, lost some).
	rep.tc = m.Truncated && len(m.Ns) == 0 && !hasRecords(m.Extra)
	// As file: the in-zone addresses of MX, SRV, SVCB and HTTPS targets among what was found.
	if extra := z.additional(m.Answer); len(extra) > 0 {
		if p, err := pack(extra); err == nil {
			rep.extra = &p
		}
	}
	switch {
	case m.Rcode == dns.RcodeNameError:
		rep.rcode, rep.ns = dns.RcodeNameError, &z.soa
	case m.Rcode == dns.RcodeServerFailure:
		rep.rcode = dns.RcodeServerFailure
	case m.Rcode == dns.RcodeSuccess && len(m.Answer) == 0:
		rep.ns = &z.soa // NODATA
	}
}

// lastRecord returns the last record of rep's answer section, or nil.
func lastRecord(rep *reply) dns.RR {
	if len(rep.an) == 0 {
		return nil
	}
	pt := &rep.an[len(rep.an)-1]
	if pt.rr != nil {
		return pt.rr
	}
	if rrs := pt.p.rrs; len(rrs) > 0 {
		return rrs[len(rrs)-1]
	}
	return nil
}

// subnetScope returns m's client-subnet option when it has a scope (RFC 7871 7.2.1), or nil.
func subnetScope(m *dns.Msg) *dns.EDNS0_SUBNET {
	o := m.IsEdns0()
	if o == nil {
		return nil
	}
	for _, opt := range o.Option {
		if e, ok := opt.(*dns.EDNS0_SUBNET); ok && e.SourceScope > 0 {
			return e
		}
	}
	return nil
}

// hasRecords reports whether extra holds a record other than the OPT pseudo-record.
func hasRecords(extra []dns.RR) bool {
	for _, rr := range extra {
		if rr.Header().Rrtype != dns.TypeOPT {
			return true
		}
	}
	return false
}
