package outbound

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/region"
	"github.com/coresteer/coresteer/plugin/pkg/statusview"
)

// Fill implements statusview.Provider (S-1): the block's endpoint x target pairs with their rank
// for the server's own region, success ratio, latency, up/down and last outcome, and the pair that
// leads for each client region the configuration names. Rankings are read with peek: the page
// never stores one (S-3).
func (o *Outbound) Fill(v *statusview.View) {
	if !o.started.Load() {
		return
	}
	z := statusview.OutboundZone{Server: o.server, Zones: slices.Clone(o.zones), Targets: o.targetsString()}
	if o.fq != nil {
		z.Note = "FQDN target: the pairs are those of the addresses resolved for each client region (O-8)"
		seen := map[*pair]bool{}
		for i := range o.fq.slots {
			e := o.fq.slots[i].Load()
			if e == nil || !e.rk.acquire() {
				continue
			}
			from := region.ID(i - 1)
			z.Pairs = append(z.Pairs, o.showPairs(e.rk, from, seen)...)
			z.Leaders = append(z.Leaders, o.leaders(e.rk, []region.ID{from})...)
			e.rk.release()
		}
		if len(z.Pairs) == 0 {
			z.Note += "; no query has resolved it yet"
		}
	} else if o.rk.acquire() {
		z.Pairs = o.showPairs(o.rk, o.loc.Server(), map[*pair]bool{})
		z.Leaders = o.leaders(o.rk, o.clientRegions())
		o.rk.release()
	}
	v.Outbound = append(v.Outbound, z)
}

// Explain implements statusview.Explainer (S-2): the zone a name is forwarded in and the pairs in
// the order a query from the client's region tries them, with what placed each (O-5). The
// region is found by the Locate ServeDNS calls (outbound ignores ECS).
func (o *Outbound) Explain(q statusview.Question) *statusview.Explanation {
	if !o.started.Load() {
		return nil
	}
	zone := o.match(q.Name)
	if zone == "" {
		return nil
	}
	r, w := statusview.Query(q)
	x := &statusview.Explanation{Plugin: "outbound", Server: o.server, Zone: zone,
		Location: statusview.Locate(o.loc, r, w, q, false)}
	x.Location.Used = true
	from, _ := o.loc.Locate(w.RemoteAddr(), r, false)
	f := &statusview.Forward{Targets: o.targetsString()}
	x.Forward = f
	rk := o.rk
	if o.fq != nil {
		e := o.fq.slots[int(from)+1].Load()
		if e == nil || !e.rk.acquire() {
			f.Note = o.fqdn + " is not resolved for this region yet: the first query resolves it through this server (O-8)"
			return x
		}
		rk = e.rk
	} else if !rk.acquire() {
		f.Note = "the block is stopping"
		return x
	}
	defer rk.release()
	f.Pairs = o.showPairs(rk, from, map[*pair]bool{})
	if from != region.None && !slices.Contains(rk.regions, from) {
		f.Note = "no endpoint in the client's region: the best endpoint elsewhere is used (O-7)"
	}
	return x
}

// showPairs returns the pairs of rk in rank order for queries from region from, with the score
// that placed each, skipping those in seen.
func (o *Outbound) showPairs(rk *ranker, from region.ID, seen map[*pair]bool) []statusview.Pair {
	now := rk.now()
	rank := rk.peek(from)
	leader := -1
	if prev := rk.byRegion[int(from)+1].Load(); prev != nil && len(prev.order) > 0 {
		leader = prev.order[0]
	}
	keys := rk.score(now, from, leader)
	var out []statusview.Pair
	for pos, i := range rank.order {
		p := rk.pairs[i]
		if seen[p] {
			continue
		}
		seen[p] = true
		ratio, lat, last, consec, _ := p.stats(now)
		sp := statusview.Pair{Endpoint: p.ep.Name, Region: p.ep.Region, Source: p.srcStr, Target: p.dstStr, Rank: pos + 1,
			Ratio: ratio, Latency: time.Duration(lat * float64(time.Second)), Up: !p.isDown(), LastOutcome: last}
		if sp.Source == "" {
			sp.Source = "default"
		}
		sp.Why = o.why(rk, i, keys[i], ratio, lat, consec, i == leader, from)
		out = append(out, sp)
	}
	return out
}

// why says what placed pair i: its bands, its distance, a demotion, the leader's bonus (O-5, O-6).
func (o *Outbound) why(rk *ranker, i int, k key, ratio, lat float64, consec int, leader bool, from region.ID) string {
	var parts []string
	parts = append(parts, fmt.Sprintf("success %.3f (band %d)", ratio, failBand(ratio)))
	if lat > 0 {
		parts = append(parts, fmt.Sprintf("latency %.1f ms (band %d)", lat*1000, latBand(lat)))
	} else {
		parts = append(parts, "no latency yet (ties with the best)")
	}
	if from == region.None {
		parts = append(parts, "client in no region: distance does not count")
	} else {
		parts = append(parts, fmt.Sprintf("%.0f km from %s", rk.table.Distance(from, rk.regions[i]), rk.table.Name(from)))
	}
	if consec >= demoteAfter {
		parts = append(parts, fmt.Sprintf("demoted: %d consecutive failures", consec))
	}
	if i < len(rk.health) && rk.health[i] != nil && rk.health[i].Checked() && !rk.health[i].Healthy() {
		parts = append(parts, "demoted: its target is unhealthy on the health board")
	}
	if leader {
		parts = append(parts, "current leader: one band of hysteresis")
	}
	if k.fail >= demotedOffset {
		parts = append(parts, "below every pair not demoted")
	}
	return strings.Join(parts, "; ")
}

// leaders returns the pair that leads for each of regions.
func (o *Outbound) leaders(rk *ranker, regions []region.ID) []statusview.Leader {
	var out []statusview.Leader
	for _, from := range regions {
		rank := rk.peek(from)
		if len(rank.order) == 0 {
			continue
		}
		p := rk.pairs[rank.order[0]]
		name := rk.table.Name(from)
		if name == "" {
			name = "(no region)"
		}
		l := statusview.Leader{ClientRegion: name, Endpoint: p.ep.Name, Source: p.srcStr, Target: p.dstStr}
		if l.Source == "" {
			l.Source = "default"
		}
		out = append(out, l)
	}
	return out
}

// clientRegions are the regions the configuration names: the server's, the endpoints' and the
// subnets'.
func (o *Outbound) clientRegions() []region.ID {
	t := o.loc.Table
	var out []region.ID
	add := func(id region.ID) {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	add(o.loc.Server())
	for _, e := range o.endpoints {
		if id, ok := t.Lookup(e.Region); ok {
			add(id)
		}
	}
	for _, s := range o.locCfg.Subnets {
		if id, ok := t.Lookup(s.Region); ok {
			add(id)
		}
	}
	return out
}

// targetsString is the block's targets as the Corefile gives them.
func (o *Outbound) targetsString() string {
	if o.fqdn != "" {
		return o.fqdn
	}
	s := make([]string, len(o.targets))
	for i, t := range o.targets {
		s[i] = t.String()
	}
	return strings.Join(s, " ")
}
