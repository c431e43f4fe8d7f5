package healthcheck

// Ready implements the ready.Readiness interface: the block is ready when every target it probes
// and every VIP it publishes has had a first verdict (H-2), unless ready_wait is off.
func (h *HealthCheck) Ready() bool {
	if !h.cfg.readyWait {
		return true
	}
	run := h.cur.Load()
	if run == nil {
		return false
	}
	if run.ready.Load() {
		return true
	}
	for _, b := range run.probes {
		if !b.t.Decided() {
			return false
		}
	}
	for _, v := range run.vips {
		if !v.vip.Decided() {
			return false
		}
	}
	// A decided target never goes back to Unknown: remember it.
	run.ready.Store(true)
	return true
}
