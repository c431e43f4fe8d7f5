package healthcheck

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/statusview"
)

// Fill implements statusview.Provider (S-1): how this block's checks probe their targets, each
// prober region's last result, the thresholds' progress, and its load balancers with the
// arithmetic of their rule; with a fleet, the fleet's members, who probes what and what decides
// (F-1 to F-4). It only reads.
func (h *HealthCheck) Fill(v *statusview.View) {
	run := h.cur.Load()
	if run == nil {
		return
	}
	if run.fleet != nil {
		run.fleet.show(&v.Fleet, h.cfg.fleet.ReplicasPerRegion)
	}
	for _, ch := range h.cfg.checks {
		h.reg.show(ch.Name, v)
	}
	slices.SortFunc(v.Fleet.Probes, func(a, b statusview.FleetProbe) int {
		return cmp.Or(strings.Compare(a.Check, b.Check), strings.Compare(a.Target, b.Target))
	})
	for _, vs := range run.vips {
		v.LoadBalancers = append(v.LoadBalancers, showLB(vs))
	}
}

// show adds the probes of check to v, each under the board keys it writes, and in a fleet who
// probes each target.
func (r *Registry) show(check string, v *statusview.View) {
	type probing struct {
		p   *probe
		run *checkRun
		ran uint32
	}
	var ps []probing
	r.mu.Lock()
	for k, p := range r.probes {
		if k.check == check {
			ps = append(ps, probing{p, p.run, p.ran})
		}
	}
	r.mu.Unlock()
	for _, x := range ps {
		pv, keys := x.p.view(x.run)
		for _, k := range keys {
			v.AddProbe(k, pv)
		}
		if fr := x.run.fleet; fr != nil {
			v.Fleet.Probes = append(v.Fleet.Probes, fr.f.who(x.run.check, pv.Target, fr.perRegion, x.ran, pv.Decides == "fleet"))
		}
	}
}

// view returns what the status page shows of p probed with run, and the board keys it writes.
func (p *probe) view(run *checkRun) (statusview.Probe, []string) {
	c := run.check
	p.mu.Lock()
	defer p.mu.Unlock()
	out := statusview.Probe{
		Target:     p.key.target.String(),
		Protocol:   c.Protocol.String(),
		Interval:   c.Interval,
		LastRound:  p.lastRound,
		Successes:  p.streak.successes,
		Failures:   p.streak.failures,
		ToHealthy:  c.HealthyThreshold,
		ToUnhealth: c.UnhealthyThreshold,
		Progress:   progress(c, p.streak),
	}
	n := c.ProbersPerRegion
	for ri, reg := range c.Regions {
		rv := statusview.RegionProbe{Region: reg.Name, Verdict: "not yet"}
		if len(p.last) == c.slots() {
			rs := p.last[ri*n : (ri+1)*n]
			rv.Verdict = "no result"
			if o := regionVerdict(rs); o != noResult {
				rv.Verdict = o.String()
			}
			for i, a := range rs {
				pp := statusview.ProberProbe{Source: "any", Result: "not yet", Reason: a.reason, Latency: a.took, At: a.at}
				if src := run.probers[ri*n+i].source; src.IsValid() {
					pp.Source = src.String()
				}
				if !a.at.IsZero() {
					pp.Result = a.outcome.String()
					if a.outcome == noResult {
						pp.Result = "no result"
					}
				}
				rv.Probers = append(rv.Probers, pp)
			}
		}
		out.Regions = append(out.Regions, rv)
	}
	if fr := run.fleet; fr != nil {
		var fv verdict
		out.Shared, fv = fr.f.states(pairKey{check: c.Name, target: out.Target})
		out.Decides = "local"
		if p.shared {
			out.Decides = "fleet"
			out.Progress = "the fleet decides (F-3), from the published prober states, each under its own prober's thresholds: " + fv.reason
		}
	}
	keys := make([]string, 0, len(p.targets))
	for t := range p.targets {
		keys = append(keys, t.Key().String())
	}
	slices.Sort(keys)
	return out, keys
}

// progress says where the thresholds of c stand for s (the rules of streak.next).
func progress(c *Check, s streak) string {
	switch s.state {
	case health.Healthy:
		return fmt.Sprintf("%d of %d consecutive failures to unhealthy", s.failures, c.UnhealthyThreshold)
	case health.Unhealthy:
		return fmt.Sprintf("%d of %d consecutive successes to healthy", s.successes, c.HealthyThreshold)
	}
	return "the first round with a result decides"
}

// showLB is a load balancer with the arithmetic of HC-4, from the same derive that writes its VIP.
func showLB(vs *vipState) statusview.LoadBalancer {
	lb := vs.lb
	st := vs.vip.Status()
	out := statusview.LoadBalancer{VIP: lb.VIP.String(), Check: lb.Check, State: st.State.String(), Since: st.Since,
		Total: len(vs.backends), Threshold: lb.Threshold}
	for i, t := range vs.backends {
		bs := t.Status()
		out.Backends = append(out.Backends, statusview.Member{Address: backendString(lb.Backends[i].Addr(), lb.Backends[i].Port()), State: bs.State.String(), Since: bs.Since})
		if bs.State == health.Healthy {
			out.Healthy++
		}
	}
	derived, reason := lb.derive(vs.backends)
	if out.Total == 0 {
		out.Arithmetic = "no backends: healthy (a passthrough load balancer)"
		return out
	}
	rel := ">="
	if out.Healthy*100 < lb.Threshold*out.Total {
		rel = "<"
	}
	out.Arithmetic = fmt.Sprintf("%d/%d = %d %% %s %d %%: %s (%s)", out.Healthy, out.Total, out.Healthy*100/out.Total, rel, lb.Threshold, derived, reason)
	return out
}

// backendString is a backend as the Corefile names it: the address, with its port when it has one.
func backendString(a netip.Addr, port uint16) string {
	if port == 0 {
		return a.String()
	}
	return netip.AddrPortFrom(a, port).String()
}
