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
	run.mu.Lock()
	for t := range run.bound {
		if !t.Decided() {
			run.mu.Unlock()
			return false
		}
	}
	run.mu.Unlock()
	for _, v := range run.vips {
		if !v.vip.Decided() {
			return false
		}
	}
	// A decided target never goes back to Unknown: remember it.
	run.ready.Store(true)
	return true
}
