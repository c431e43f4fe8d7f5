package health

// Prober probes the targets of the checks it owns on demand. healthcheck registers one per check
// at startup; a consumer whose targets change while it runs (a routingpolicy file reload adding
// an address) asks through Board.Probe, so the new target is probed like the ones known at
// startup instead of being served unchecked.
type Prober interface {
	// Probe starts probing k, once however often it is asked (H-3), publishes its state on the
	// board, and returns the function that gives this demand back.
	Probe(k Key) (release func())
}

// SetProber makes p the prober of check; the latest registration wins, so a reload's new
// instance takes over from the old one.
func (b *Board) SetProber(check string, p Prober) {
	b.mu.Lock()
	if b.probers == nil {
		b.probers = make(map[string]Prober)
	}
	b.probers[check] = p
	b.mu.Unlock()
}

// ClearProber removes p as the prober of check, unless another has replaced it since.
func (b *Board) ClearProber(check string, p Prober) {
	b.mu.Lock()
	if b.probers[check] == p {
		delete(b.probers, check)
	}
	b.mu.Unlock()
}

// Probe asks the prober of k.Check to probe k. It returns false, with a release that does
// nothing, when no prober owns that check (the target is then served unchecked, H-2).
func (b *Board) Probe(k Key) (release func(), ok bool) {
	b.mu.RLock()
	p := b.probers[k.Check]
	b.mu.RUnlock()
	if p == nil {
		return func() {}, false
	}
	return p.Probe(k), true
}
