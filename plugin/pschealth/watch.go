package pschealth

import (
	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/lifecycle"

	"github.com/prometheus/client_golang/prometheus"
)

// writers orders the instances that compute one composite (keyed by its destination's target)
// or one source (keyed by board and name): during a reload only the newest writes the state and
// the metrics, so the new Corefile's policy is the one whose result stands (H-6).
var writers = lifecycle.NewWriters()

type sourceKey struct {
	board *health.Board
	name  string
}

// sourceRun is a source at run time: its backend targets and its metric series.
type sourceRun struct {
	src      *Source
	targets  []*health.Target
	wants    []func() // the probe demand of its backends
	writer   *lifecycle.Writer
	state    stateGauges
	backends stateGauges
	minCount prometheus.Gauge // source_min_healthy
	minPct   prometheus.Gauge // source_min_healthy_percent
	verdict  verdict
}

// compositeRun is a composite at run time.
type compositeRun struct {
	comp      *Composite
	sources   []*sourceRun
	target    *health.Target // on the board, or on the memory board when not published
	board     *health.Board  // where target lives
	real      *health.Target // the destination on the board, held to detect other writers
	writer    *lifecycle.Writer
	published bool
	dryRun    bool
	state     stateGauges
	pubGauge  prometheus.Gauge // composite_published
	verdicts  []verdict
	states    []health.State
}

// OnStartup acquires the backends and destinations, wants the backends probed, publishes the
// destinations (unless dry_run), computes every composite once and then recomputes whenever the
// board reports a change of a backend (no polling). A reload acquires here before the old
// instance releases in its OnShutdown, so backend and composite states survive it (H-4).
func (p *PSCHealth) OnStartup() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		return nil
	}
	p.running = true
	p.watched = map[health.Key]bool{}
	p.wake = make(chan struct{}, 1)
	wake := p.wake
	// A newer instance that wrote our composites or sources has left: compute and write again.
	rewrite := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}

	runs := map[*Source]*sourceRun{}
	for _, s := range p.cfg.Sources {
		r := &sourceRun{src: s}
		for _, k := range s.Backends {
			r.targets = append(r.targets, p.board.Acquire(k))
			// P-6: a dry run has no effect on consumers, readiness included.
			want := p.demand.Want
			if p.cfg.DryRun {
				want = p.demand.WantUngated
			}
			r.wants = append(r.wants, want(k))
			p.watched[k] = true
		}
		r.writer = writers.Join(sourceKey{p.board, s.Name}, p.gen, rewrite)
		sourceSeries.Hold(s.Name)
		r.state = newStateGauges(sourceState, s.Name)
		r.backends = newStateGauges(sourceBackends, s.Name)
		r.minCount = sourceMinHealthy.WithLabelValues(s.Name)
		r.minPct = sourceMinHealthyPercent.WithLabelValues(s.Name)
		runs[s] = r
		p.srcs = append(p.srcs, r)
	}

	for _, comp := range p.cfg.Composites {
		r := &compositeRun{comp: comp, dryRun: p.cfg.DryRun}
		for _, s := range comp.Sources {
			r.sources = append(r.sources, runs[s])
		}
		r.verdicts = make([]verdict, len(r.sources))
		r.states = make([]health.State, len(r.sources))
		r.real = p.board.Acquire(comp.Key())
		dest := comp.Destination.String()
		if !p.cfg.DryRun {
			r.published = publish(p.board, r.real)
			if !r.published {
				log.Errorf("Destination %s of composite %q is already published by another writer (a healthcheck loadbalancer VIP?): "+
					"a destination and a VIP must not share an address; computing the composite without publishing it", dest, comp.Name)
			}
		}
		if r.published {
			r.target, r.board = r.real, p.board
		} else {
			r.target, r.board = p.memory.Acquire(comp.Key()), p.memory
		}
		r.writer = writers.Join(r.real, p.gen, rewrite)
		compositeSeries.Hold(comp.Name, dest)
		compositeNames.Hold(comp.Name)
		r.state = newStateGauges(compositeState, comp.Name, dest)
		r.pubGauge = compositePublished.WithLabelValues(comp.Name, dest)
		p.comps = append(p.comps, r)
	}

	p.stop = make(chan struct{})
	p.done = make(chan struct{})
	watched := p.watched
	// Subscribe before the first computation, so a change in between wakes the loop.
	p.cancel = p.board.Subscribe(func(c health.Change) {
		if watched[c.Key] {
			p.seen.Add(1)
			select {
			case wake <- struct{}{}:
			default: // a recomputation is pending already and will see this change
			}
		}
	})
	p.evaluate()
	go p.loop(p.wake, p.stop, p.done)
	return nil
}

// loop recomputes on every wake-up. Subscribers run on the board writer's goroutine and may not
// block nor write the board, so the work happens here.
func (p *PSCHealth) loop(wake, stop, done chan struct{}) {
	defer close(done)
	for {
		select {
		case <-stop:
			return
		case <-wake:
			p.evaluate()
		}
	}
}

// OnShutdown stops the loop, unpublishes the destinations and gives back every target, want and
// metric series. A destination nobody publishes any more goes back to Unknown, so a consumer that
// still holds it serves it (H-2) instead of keeping a stale Unhealthy. It also runs when a failed
// reload abandons this instance (plugin/pkg/lifecycle).
func (p *PSCHealth) OnShutdown() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running {
		return nil
	}
	p.running = false
	p.cancel()
	close(p.stop)
	<-p.done
	p.ready.Store(false)

	for _, r := range p.comps {
		r.writer.Leave()
		if r.published {
			if unpublish(p.board, r.real) {
				p.board.Set(r.real, health.Unknown, "no longer published by pschealth")
			}
		} else {
			p.memory.Release(r.target)
		}
		p.board.Release(r.real)
		compositeSeries.Release(r.comp.Name, r.comp.Destination.String())
		compositeNames.Release(r.comp.Name)
	}
	for _, r := range p.srcs {
		r.writer.Leave()
		for _, release := range r.wants {
			release()
		}
		for _, t := range r.targets {
			p.board.Release(t)
		}
		sourceSeries.Release(r.src.Name)
	}
	p.srcs, p.comps, p.watched = nil, nil, nil
	return nil
}

// evaluate recomputes every source and composite from the backend states and writes those of
// which this instance is the newest writer. It runs in OnStartup and then only in loop.
func (p *PSCHealth) evaluate() {
	seen := p.seen.Load()
	defer p.evaluated.Store(seen)
	for _, r := range p.srcs {
		var t Tally
		for _, bt := range r.targets {
			t.Add(bt.State())
		}
		r.verdict = verdict{src: r.src, tally: t, state: r.src.Policy.Evaluate(t)}
		// Every series of the source, its thresholds too: a writer that becomes the newest again
		// (a failed reload's instance left) writes over all the abandoned one wrote.
		r.writer.Write(func() {
			r.minCount.Set(float64(r.src.Policy.MinCount))
			r.minPct.Set(float64(r.src.Policy.MinPercent))
			r.state.set(r.verdict.state.String())
			r.backends[0].Set(float64(t.Healthy))
			r.backends[1].Set(float64(t.Unhealthy))
			r.backends[2].Set(float64(t.Unknown))
		})
	}

	decided := true
	for _, r := range p.comps {
		for i, s := range r.sources {
			r.verdicts[i] = s.verdict
			r.states[i] = s.verdict.state
		}
		state := Combine(r.states)
		// P-6: a dry-run composite, or one another writer owns, has no effect on consumers, so
		// readiness does not wait for it.
		if state == health.Unknown && r.published {
			decided = false
		}
		r.writer.Write(func() {
			if old := r.target.State(); old != state {
				why := cause(state, r.verdicts)
				if r.board.Set(r.target, state, why) {
					compositeChanges.WithLabelValues(r.comp.Name, state.String()).Inc()
					p.logChange(r, old, state, why)
				}
			}
			pub := 0.0
			if r.published {
				pub = 1
			}
			r.pubGauge.Set(pub)
			// The gauge last: whoever sees it change sees the board and the log line already written.
			r.state.set(state.String())
		})
	}
	p.ready.Store(decided)
}

// logChange writes one line per composite state change, naming the sources and the thresholds
// that caused it (P-6).
func (p *PSCHealth) logChange(r *compositeRun, old, state health.State, why string) {
	name, dest := r.comp.Name, r.comp.Destination
	switch {
	case r.published:
		if state == health.Unhealthy {
			log.Warningf("Composite %q (destination %s) is unhealthy, was %s: %s", name, dest, old, why)
			return
		}
		log.Infof("Composite %q (destination %s) is %s, was %s: %s", name, dest, state, old, why)
	case r.dryRun:
		log.Infof("Dry run: composite %q (destination %s) would be %s, was %s (not published): %s", name, dest, state, old, why)
	default:
		log.Infof("Composite %q (destination %s) would be %s, was %s (not published: another writer owns the address): %s", name, dest, state, old, why)
	}
}
