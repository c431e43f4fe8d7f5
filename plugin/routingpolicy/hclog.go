package routingpolicy

import (
	"strings"

	"github.com/coredns/coredns/request"
	"github.com/coresteer/coresteer/plugin/pkg/region"
)

// logAnswer writes one line per answer with the health of the health-checked addresses behind
// it (HC-7, the reference's health-check logging). Only with the `log` property: it allocates.
func (rp *RoutingPolicy) logAnswer(state request.Request, us []used, src region.ID) {
	var b strings.Builder
	for i := range us {
		p, o := us[i].p, &us[i].o
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.label)
		b.WriteString(" ")
		b.WriteString(p.kind.String())
		b.WriteString(" item=")
		b.WriteString(o.it.label)
		if o.failOpen {
			b.WriteString(" fail-open")
		}
		if o.fallback {
			b.WriteString(" fallback")
		}
		b.WriteString(" health=[")
		first := true
		p.each(func(a *addr) {
			if !a.checked() {
				return
			}
			if !first {
				b.WriteString(" ")
			}
			first = false
			b.WriteString(a.key.String())
			b.WriteString("=")
			if a.t == nil {
				b.WriteString("unknown")
			} else {
				b.WriteString(a.t.State().String())
			}
		})
		b.WriteString("]")
	}
	log.Infof("Answer %s %s for %s region %q: %s", state.Name(), state.Type(), state.IP(), rp.cfg.Locator.Table.Name(src), b.String())
}
