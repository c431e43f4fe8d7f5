package routingpolicy

import (
	"github.com/coresteer/coresteer/plugin/pkg/statusview"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Fill implements statusview.Provider (S-1): the record sets with a policy that the block serves
// now, each item with its addresses and their health, for WRR the configured share next to the
// share served since the record set was configured, and for a failover the side that answers. It
// only reads: the served counts are read from the answers_total series, not from the query path.
func (rp *RoutingPolicy) Fill(v *statusview.View) {
	rp.mu.Lock()
	started := rp.started
	rp.mu.Unlock()
	if !started {
		return
	}
	d := rp.data.Load()
	served := servedCounts()
	for _, p := range d.policies {
		rs := statusview.RecordSet{Server: rp.server, Zone: p.zone, Name: p.name, Type: dns.TypeToString[p.qtype],
			Policy: p.kind.String(), Fence: p.fence, Trickle: p.trickle, Items: showItems(p, served)}
		if p.kind == Failover {
			rs.Backup = showItems(p.backup, served)
			// The side answering queries from the server's own region, trickle aside.
			s := source{done: true, id: rp.cfg.Locator.Server()}
			_, all, o := p.failover(&s, false)
			switch {
			case all:
				rs.Answering = "fail open (primary and backup unhealthy, R-FO-4)"
			case o.backup:
				rs.Answering = "backup (every primary address unhealthy, R-FO-2)"
			default:
				rs.Answering = "primary"
			}
		}
		v.RecordSets = append(v.RecordSets, rs)
	}
}

// showItems lays out the items of p with their shares.
func showItems(p *policy, served map[[3]string]uint64) []statusview.Item {
	var total float64
	var answers uint64
	for i := range p.items {
		total += p.items[i].weight
		answers += served[[3]string{p.zone, p.label, p.items[i].label}]
	}
	out := make([]statusview.Item, 0, len(p.items))
	for i := range p.items {
		it := &p.items[i]
		si := statusview.Item{Label: it.label, Weight: it.weight, Healthy: it.healthy(), Addresses: addresses(it)}
		if p.kind == Geo {
			si.Location = it.label
		}
		si.Answers = served[[3]string{p.zone, p.label, it.label}]
		if p.kind == WRR {
			// As setShares publishes it (R-WRR-2, R-WRR-3).
			si.Configured = 1 / float64(len(p.items))
			if total > 0 {
				si.Configured = it.weight / total
			}
			if answers > 0 {
				si.Served = float64(si.Answers) / float64(answers)
			}
		}
		out = append(out, si)
	}
	return out
}

// servedCounts reads answers_total, summed over the servers, by zone, record set and item.
func servedCounts() map[[3]string]uint64 {
	out := make(map[[3]string]uint64)
	ch := make(chan prometheus.Metric, 64)
	go func() {
		answersTotal.Collect(ch)
		close(ch)
	}()
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) != nil || pb.GetCounter() == nil {
			continue
		}
		var k [3]string
		for _, l := range pb.GetLabel() {
			switch l.GetName() {
			case "zone":
				k[0] = l.GetValue()
			case "name":
				k[1] = l.GetValue()
			case "item":
				k[2] = l.GetValue()
			}
		}
		out[k] += uint64(pb.GetCounter().GetValue())
	}
	return out
}
