package routingpolicy

// Ready implements ready.Readiness: the block is ready once every health-checked address it
// serves has a first verdict, so a fresh replica does not answer blind (H-2). Addresses that
// nothing publishes do not hold it back.
func (rp *RoutingPolicy) Ready() bool {
	d := rp.data.Load()
	ok := true
	for _, p := range d.policies {
		p.each(func(a *addr) {
			if a.t != nil && a.t.Checked() && !a.t.Decided() {
				ok = false
			}
		})
		if !ok {
			return false
		}
	}
	return true
}
