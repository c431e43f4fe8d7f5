package routingpolicy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/coredns/coredns/request"
	"github.com/coresteer/coresteer/plugin/pkg/region"
	"github.com/coresteer/coresteer/plugin/pkg/statusview"

	"github.com/miekg/dns"
)

// Explain implements statusview.Explainer (S-2): it runs the lookup ServeDNS runs, on the same
// data and board, for a query made up from q, and then lays out each policy that took part: every
// item in or out and why, and every possible result with its probability, computed from the same
// functions that draw (pool and chance for WRR, pickGeo, failover with and without the trickle).
// Nothing is written: no metric, no metadata, no log (S-3).
func (rp *RoutingPolicy) Explain(q statusview.Question) *statusview.Explanation {
	r, w := statusview.Query(q)
	state := request.Request{W: w, Req: r}
	qname := queryName(&state)
	d := rp.data.Load()
	z := d.match(qname)
	if z == nil {
		return nil
	}
	x := &statusview.Explanation{Plugin: "routingpolicy", Server: rp.server, Zone: z.origin}
	ans := &statusview.Answer{Scope: -1}
	x.Answer = ans
	loc := rp.cfg.Locator
	x.Location = statusview.Locate(loc, r, w, q, rp.cfg.Public)
	if q.Type == dns.TypeAXFR || q.Type == dns.TypeIXFR {
		ans.Rcode = dns.RcodeToString[dns.RcodeRefused]
		ans.Note = "zone transfers are refused"
		return x
	}

	src := source{loc: loc, w: w, r: r, public: rp.cfg.Public, id: region.None}
	var us [maxUsed]used
	rnd := rand.Uint64 // the handler's may be a test's seeded source, not safe for concurrent use
	var res reply
	z.lookup(&res, qname, q.Type, &src, rnd, &us)
	m := res.msg(r)
	ans.Rcode = dns.RcodeToString[res.rcode]
	if res.rcode == dns.RcodeNameError && len(m.Answer) == 0 && rp.cfg.Fall.Through(qname) {
		ans.PassedOn = true
		ans.Note = "the name does not exist here and fallthrough passes the query to the next plugin"
	}
	for _, rr := range m.Answer {
		ans.Records = append(ans.Records, rr.String())
	}
	for _, rr := range m.Ns {
		ans.Authority = append(ans.Authority, rr.String())
	}
	// R-ZONE-2: a referral (one not after an in-zone CNAME) is not authoritative, as ServeDNS
	// answers it.
	ans.Authoritative = res.authoritative()
	if res.referral {
		ans.Referral = true
		cut := ""
		if len(m.Ns) > 0 {
			cut = m.Ns[0].Header().Name
		}
		ans.Note = fmt.Sprintf("a referral: the name is under the zone cut %s, delegated to the name servers in the authority section; this server does not answer it (R-ZONE-2)", cut)
	}
	if res.out {
		if c, ok := lastRecord(&res).(*dns.CNAME); ok {
			ans.Note = fmt.Sprintf("the CNAME chain leaves the zone for %s: a query looks that name up through the server's plugins and adds what it finds, as file does (not shown here)", c.Target)
		}
	}
	// L-1: only a draw that locates the client carries the ECS scope (ServeDNS sets it when the
	// lookup located the client): scope is its value, each outcome says whether its draw does.
	scope := -1
	ls := source{loc: loc, w: w, r: r, public: rp.cfg.Public, id: region.None}
	if ls.region(); ls.src.ECS != nil {
		scope = int(region.ScopeOption(ls.src.ECS).SourceScope)
	}
	for i := range us[:res.n] {
		p := us[i].p
		ans.Sets = append(ans.Sets, p.explain(&src, rnd, scope))
		if p.qtype == dns.TypeCNAME && len(p.items) > 1 {
			ans.Note = "the CNAME chase in the records follows one draw; another draw may lead elsewhere"
		}
	}
	chainScope(ans.Sets, scope)
	for _, set := range ans.Sets {
		for _, o := range set.Outcomes {
			if o.UsesRegion {
				x.Location.Used = true
			}
		}
	}
	if x.Location.Used && scope >= 0 {
		ans.Scope = scope
	}
	return x
}

// explain lays out p for a query from s. scope is the ECS scope an answer carries when its draw
// locates the client (-1: none).
func (p *policy) explain(s *source, rnd func() uint64, scope int) statusview.SetExplain {
	out := statusview.SetExplain{Name: p.name, Type: dns.TypeToString[p.qtype], Policy: p.kind.String(), Fence: p.fence, Trickle: p.trickle}
	switch p.kind {
	case WRR:
		var w wrrPool
		p.pool(&w)
		for i := range p.items {
			it := &p.items[i]
			c := p.chance(&w, i)
			out.Items = append(out.Items, itemExplain(it, p.kind, c > 0, p.wrrWhy(&w, i, c)))
			if c > 0 {
				why := fmt.Sprintf("weight %g of %g", it.weight, w.total)
				if w.total == 0 {
					why = fmt.Sprintf("an even split between %d buckets (R-WRR-3)", w.n)
				}
				// WRR never locates the client.
				out.Outcomes = append(out.Outcomes, outcomeOf(c, it, w.all, rnd, outcome{failOpen: w.all && p.anyChecked()}, why, false, scope))
			}
		}
	case Geo:
		from := s.region()
		it, all, fb := p.pickGeo(from, true)
		out.Items = p.geoItems(from, it, all)
		out.Outcomes = append(out.Outcomes, outcomeOf(1, it, all, rnd, outcome{failOpen: all && !p.fence, fallback: fb}, geoWhy(p, it, all, fb, from), true, scope))
	case Failover:
		from := s.region()
		primary := &p.items[0]
		// R-FO-2: a fenced backup whose location has nothing healthy counts as unhealthy, as
		// failover decides: no backup location answers then.
		bit, ball, _ := p.backup.pickGeo(from, false)
		if ball {
			bit = nil
		}
		why := "its addresses are healthy: it answers (R-FO-1)"
		switch {
		case !primary.healthy() && bit != nil:
			why = "every address is unhealthy: the backup answers (R-FO-2)"
		case !primary.healthy():
			why = "every address is unhealthy, and so is the backup: the primary answers as if healthy (R-FO-4)" + unhealthySince(primary)
		}
		out.Items = []statusview.ItemExplain{itemExplain(primary, p.kind, primary.healthy(), why)}
		out.Backup = p.backup.geoItems(from, bit, false)
		if bit == nil && !primary.healthy() && p.trickle > 0 && len(out.Backup) > 0 {
			out.Backup[0].Why += fmt.Sprintf("; the primary is down too: the trickle's share (%g) gets this location as if healthy (R-FO-4)", p.trickle)
		}
		draws := []struct {
			trickle bool
			prob    float64
		}{{false, 1 - min(p.trickle, 1)}, {true, min(p.trickle, 1)}}
		for _, d := range draws {
			if d.prob <= 0 {
				continue
			}
			// Each draw from a client not located yet, as ServeDNS's: a draw that stays on a
			// healthy primary never locates the client, so its answer carries no ECS scope.
			ds := *s
			ds.done = false
			it, all, o := p.failover(&ds, d.trickle)
			why := "the trickle draw keeps the query on the primary side"
			if d.trickle {
				why = fmt.Sprintf("the trickle (%g) sends the query to the backup side (R-FO-3)", p.trickle)
				if !o.backup {
					why = fmt.Sprintf("the trickle (%g) would send the query to the backup side, which has nothing healthy to answer with (R-FO-3)", p.trickle)
				}
			}
			if p.trickle == 0 {
				why = "no trickle"
			}
			out.Outcomes = mergeOutcome(out.Outcomes, outcomeOf(d.prob, it, all, rnd, o, why, ds.done, scope))
		}
	}
	return out
}

// chainScope sets the scope of the outcomes of sets that do not locate the client when another
// set of the chain always does: ServeDNS sets the scope when any policy of the lookup located it.
func chainScope(sets []statusview.SetExplain, scope int) {
	for i := range sets {
		always := len(sets[i].Outcomes) > 0
		for _, o := range sets[i].Outcomes {
			always = always && o.UsesRegion
		}
		if !always {
			continue
		}
		for j := range sets {
			for k := range sets[j].Outcomes {
				if o := &sets[j].Outcomes[k]; !o.UsesRegion {
					o.UsesRegion, o.Scope = true, scope
				}
			}
		}
	}
}

// wrrWhy says why bucket i of p is in or out of the draw w.
func (p *policy) wrrWhy(w *wrrPool, i int, c float64) string {
	it := &p.items[i]
	switch {
	case w.all && it.weight == 0 && c == 0:
		return "nothing is healthy and weight 0: a weighted bucket answers (R-WRR-6, R-WRR-7)"
	case w.all:
		return fmt.Sprintf("nothing is healthy: answering as if everything were (R-WRR-7), probability %.4g", c)
	case !it.healthy():
		return "no healthy address: not eligible, its share goes to the healthy buckets (R-WRR-4)" + unhealthySince(it)
	case it.weight == 0 && c == 0:
		return "weight 0: answers only when every weighted bucket is unhealthy (R-WRR-5)"
	}
	return fmt.Sprintf("eligible, probability %.4g (R-WRR-2)", c)
}

// geoItems lays out the locations of a geo policy nearest first for from, chosen being the one
// that answers (nil when none can, for a failover's backup).
func (p *policy) geoItems(from region.ID, chosen *item, all bool) []statusview.ItemExplain {
	out := make([]statusview.ItemExplain, 0, len(p.items))
	passed := true // before the chosen location in nearest order
	for n, i := range p.order(from) {
		it := &p.items[i]
		var why string
		switch {
		case it == chosen && all && p.fence:
			why = "fenced: the client's location answers with all its addresses although none is healthy (R-GEO-5)"
		case it == chosen && all:
			why = "every location is unhealthy: the nearest answers as if healthy (R-GEO-6)"
		case it == chosen && n == 0:
			why = "the nearest location to the client's region: it answers (R-GEO-1)"
		case it == chosen:
			why = "the nearest location with a healthy address: it answers (R-GEO-4)"
		case p.fence && chosen == nil && n == 0:
			// Only a failover's backup: the location has nothing healthy and a failover does
			// not serve a dead location over its primary (R-FO-2).
			why = "fenced: the client's location has nothing healthy, and a failover does not serve a dead location: the backup does not answer (R-GEO-5, R-FO-2)" + unhealthySince(it)
		case p.fence:
			why = "another region: fencing never leaves the client's location (R-GEO-5)"
		case chosen == nil && !it.healthy():
			why = "every address is unhealthy" + unhealthySince(it)
		case passed && !it.healthy():
			why = "nearer, but every address is unhealthy: passed over (R-GEO-4)" + unhealthySince(it)
		default:
			why = "another region, farther than the one that answers"
		}
		if it == chosen {
			passed = false
		}
		out = append(out, itemExplain(it, p.kind, it == chosen, why))
	}
	return out
}

// geoWhy says why a geo policy answered with it.
func geoWhy(p *policy, it *item, all, fb bool, from region.ID) string {
	switch {
	case all && p.fence:
		return "fenced location with nothing healthy: all its addresses (R-GEO-5)"
	case all:
		return "nothing is healthy: fail open to the nearest location (R-GEO-6)"
	case fb:
		return "the nearest healthy location (R-GEO-4)"
	case it.loc == from:
		return "the location of the client's region (R-GEO-1)"
	}
	return "the location nearest to the client's region (R-GEO-1)"
}

// unhealthySince names when the first checked address of it turned unhealthy and why.
func unhealthySince(it *item) string {
	for i := range it.addrs {
		a := &it.addrs[i]
		if a.checked() && !a.ok() && a.t != nil {
			st := a.t.Status()
			return fmt.Sprintf("; %s unhealthy since %s (%s)", rdata(a.rr), st.Since.UTC().Format("2006-01-02 15:04:05Z"), st.Reason)
		}
	}
	return ""
}

// outcomeOf is one possible result: it answering, served whole when all is set; located says
// whether its draw locates the client, and so carries scope.
func outcomeOf(prob float64, it *item, all bool, rnd func() uint64, o outcome, why string, located bool, scope int) statusview.Outcome {
	out := statusview.Outcome{Probability: prob, Item: it.label, FailOpen: o.failOpen, Fallback: o.fallback, Why: why,
		UsesRegion: located, Scope: -1}
	if located {
		out.Scope = scope
	}
	if o.backup {
		out.Side = "backup"
	}
	for _, pt := range it.appendRRs(nil, all, rnd) {
		for _, rr := range pt.p.rrs {
			out.Addresses = append(out.Addresses, rdata(rr))
		}
	}
	slices.Sort(out.Addresses)
	return out
}

// mergeOutcome adds o to outs, adding up the probabilities of identical results.
func mergeOutcome(outs []statusview.Outcome, o statusview.Outcome) []statusview.Outcome {
	if o.Side == "" {
		o.Side = "primary"
	}
	for i := range outs {
		if outs[i].Item == o.Item && outs[i].Side == o.Side && slices.Equal(outs[i].Addresses, o.Addresses) && outs[i].FailOpen == o.FailOpen &&
			outs[i].Scope == o.Scope {
			outs[i].Probability += o.Probability
			outs[i].UsesRegion = outs[i].UsesRegion || o.UsesRegion
			outs[i].Why += "; or " + o.Why
			return outs
		}
	}
	return append(outs, o)
}

// itemExplain lays out one item.
func itemExplain(it *item, k Kind, eligible bool, why string) statusview.ItemExplain {
	out := statusview.ItemExplain{Label: it.label, Weight: it.weight, Eligible: eligible, Why: why, Addresses: addresses(it)}
	if k == Geo {
		out.Location = it.label
	}
	return out
}

// addresses are the rdata of it with their health.
func addresses(it *item) []statusview.Address {
	out := make([]statusview.Address, 0, len(it.addrs))
	for i := range it.addrs {
		a := &it.addrs[i]
		v := statusview.Address{Value: rdata(a.rr), Checked: a.checked(), State: "unchecked"}
		if a.t != nil {
			v.Target = a.t.Key().String()
		}
		if v.Checked && a.t != nil {
			st := a.t.Status()
			v.State, v.Since, v.Reason = st.State.String(), st.Since, st.Reason
		}
		out = append(out, v)
	}
	return out
}

// rdata is the data of rr as a master file writes it, without the owner, TTL, class and type.
func rdata(rr dns.RR) string {
	switch v := rr.(type) {
	case *dns.A:
		return v.A.String()
	case *dns.AAAA:
		return v.AAAA.String()
	}
	return strings.TrimPrefix(rr.String(), rr.Header().String())
}
