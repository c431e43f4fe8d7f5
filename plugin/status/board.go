package status

import (
	"net/netip"

	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/statusview"
)

// boardView shows the health-checked targets of the board (S-1): what a probe, a load balancer or
// a composite publishes. Addresses nobody checks are left out: they are always served.
type boardView struct {
	board *health.Board
}

// Fill implements statusview.Provider.
func (b boardView) Fill(v *statusview.View) {
	for _, t := range b.board.Targets() {
		if !t.Checked() {
			continue
		}
		k, st := t.Key(), t.Status()
		addr := k.Addr.String()
		if k.Port != 0 {
			addr = netip.AddrPortFrom(k.Addr, k.Port).String()
		}
		v.Targets = append(v.Targets, statusview.Target{Key: k.String(), Check: k.Check, Address: addr,
			State: st.State.String(), Since: st.Since, Reason: st.Reason})
	}
}
