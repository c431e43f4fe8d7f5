package pschealth

import (
	"fmt"

	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/statusview"
)

// Fill implements statusview.Provider (S-1): each composite with its state, dry run and
// publication marked, and each source's healthy/total against its policy, counted afresh from the
// board with the functions evaluate uses (Tally, Policy.Evaluate). It only reads.
func (p *PSCHealth) Fill(v *statusview.View) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running {
		return
	}
	for _, r := range p.comps {
		st := r.target.Status()
		c := statusview.Composite{Name: r.comp.Name, Destination: r.comp.Destination.String(), State: st.State.String(),
			Since: st.Since, Reason: st.Reason, DryRun: r.dryRun, Published: r.published}
		for _, s := range r.sources {
			c.Sources = append(c.Sources, showSource(s))
		}
		v.Composites = append(v.Composites, c)
	}
}

// showSource is a source against its policy (P-1).
func showSource(r *sourceRun) statusview.Source {
	var t Tally
	pol := r.src.Policy
	out := statusview.Source{Name: r.src.Name, Check: r.src.Check, Policy: pol.Name, MinPercent: pol.MinPercent, MinCount: pol.MinCount}
	for i, bt := range r.targets {
		st := bt.Status()
		t.Add(st.State)
		k := r.src.Backends[i]
		a := k.Addr.String()
		if k.Port != 0 {
			a = fmt.Sprintf("%s:%d", a, k.Port)
		}
		out.Backends = append(out.Backends, statusview.Member{Address: a, State: st.State.String(), Since: st.Since})
	}
	state := pol.Evaluate(t)
	out.State, out.Healthy, out.Unknown, out.Total = state.String(), t.Healthy, t.Unknown, t.Total()
	pct, cnt := ">=", ">="
	if t.Healthy*100 < pol.MinPercent*t.Total() {
		pct = "<"
	}
	if t.Healthy < pol.MinCount {
		cnt = "<"
	}
	out.Arithmetic = fmt.Sprintf("%d/%d = %d %% %s %d %% and %d %s %d", t.Healthy, t.Total(), t.Percent(), pct, pol.MinPercent, t.Healthy, cnt, pol.MinCount)
	if t.Unknown > 0 {
		out.Arithmetic += fmt.Sprintf(" (%d without a verdict)", t.Unknown)
	}
	out.Arithmetic += ": " + state.String()
	if state == health.Unknown {
		out.Arithmetic += " (served as healthy until decided, H-2)"
	}
	return out
}
