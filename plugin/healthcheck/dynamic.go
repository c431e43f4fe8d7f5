package healthcheck

import (
	"sync"

	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// Probe implements health.Prober: it probes k with this block's check k.Check from now on, for a
// consumer whose targets changed while it runs (a routingpolicy file reload that adds an
// address). The registry probes each (check, target) once however many ask (H-3), so asking for
// a target already probed only adds a reference.
func (h *HealthCheck) Probe(k health.Key) (release func()) {
	h.dynMu.Lock()
	defer h.dynMu.Unlock()
	run := h.cur.Load()
	if run == nil {
		return func() {}
	}
	cr := run.runs[k.Check]
	if cr == nil {
		return func() {}
	}
	b := h.bind(cr, k)
	var once sync.Once
	return func() { once.Do(func() { h.unbind(b) }) }
}
