package pschealth

// Ready reports whether every composite it publishes has a verdict, so a fresh replica does not
// answer with composites it has not judged yet (H-2). Unknown composites are served meanwhile. A
// dry-run composite has no effect on consumers (P-6) and does not count.
func (p *PSCHealth) Ready() bool { return p.ready.Load() }
