package pschealth

// Ready reports whether every composite has a verdict, so a fresh replica does not answer with
// composites it has not judged yet (H-2). Unknown composites are served meanwhile.
func (p *PSCHealth) Ready() bool { return p.ready.Load() }
