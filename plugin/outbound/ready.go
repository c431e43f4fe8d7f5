package outbound

// Ready implements ready.Readiness: the zone is ready once its endpoints are bound to this
// host's addresses (startup done). Forwarding needs no first verdict: with no data the nearest
// endpoint is used (O-5).
func (o *Outbound) Ready() bool { return o.started.Load() }
