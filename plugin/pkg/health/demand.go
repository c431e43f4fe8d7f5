package health

import (
	"sort"
	"sync"

	"github.com/coredns/caddy"
)

// Demand is the probe demand of one Corefile instance, for the instance's whole life: the checks
// its healthcheck blocks define, and the (check, target) pairs its consumers want probed.
//
// H-6, the one way in. A consumer (a routingpolicy record set, a pschealth source, a healthcheck
// load balancer) calls Want when it starts naming a pair, at startup or later (a file reload),
// and calls the release it got when it stops naming it (a file reload, its shutdown, or the
// abandon of a failed reload, plugin/pkg/lifecycle). The healthcheck block that defines a check
// serves it from its startup to its shutdown (Serve): it is handed every pair wanted with that
// check, made before or after, and each pair's stop when its last want is released or when the
// block stops serving. Nothing else starts or stops a probe.
//
// The invariant kept here: while an instance lives, the pairs its blocks probe are exactly the
// pairs its consumers want, with a check one of its blocks serves. The probe registry of
// healthcheck adds the instances up, probing each pair once (H-3) and keeping its verdict while
// any instance wants it (H-4); so what the process probes is what the live configuration names,
// during a reload the union of the old and the new one. A failed reload's instance gives back its
// wants and stops serving; the surviving instance's Demand was never touched, so its file
// reloads go on as before.
type Demand struct {
	mu      sync.Mutex
	checks  map[string]bool
	servers map[string]func(Key) (stop func()) // by check, while its block runs
	wants   map[Key]*want
}

// want is one wanted pair: how many consumers want it, how many of them hold readiness back until
// it has a verdict, and the stop of its probe while a block serves its check.
type want struct {
	refs, gating int
	stop         func()
}

// NewDemand returns an empty Demand. Plugins get their instance's with DemandOf; tests of a single
// plugin make their own.
func NewDemand() *Demand {
	return &Demand{checks: make(map[string]bool), servers: make(map[string]func(Key) func()), wants: make(map[Key]*want)}
}

type demandKey struct{}

// DemandOf returns the Demand of the Corefile instance that c is setting up.
func DemandOf(c *caddy.Controller) *Demand {
	if d, ok := c.Get(demandKey{}).(*Demand); ok {
		return d
	}
	d := NewDemand()
	c.Set(demandKey{}, d)
	return d
}

// DefineCheck records, at setup, that a check named name exists in this instance. It returns
// false when the name was defined already.
func (d *Demand) DefineCheck(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.checks[name] {
		return false
	}
	d.checks[name] = true
	return true
}

// HasCheck reports whether a check named name is defined in this instance.
func (d *Demand) HasCheck(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.checks[name]
}

// Checks returns the names of the defined checks, sorted.
func (d *Demand) Checks() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, 0, len(d.checks))
	for n := range d.checks {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Want asks for k to be probed with the check k.Check, until release is called. Asking for a
// pair already wanted only counts one more consumer (H-3). release may be called more than once.
// The instance is not ready until k has a verdict (H-2, Gates).
func (d *Demand) Want(k Key) (release func()) { return d.want(k, 1) }

// WantUngated is Want for a consumer that has no effect on answers, a pschealth dry run (P-6):
// k is probed, but readiness does not wait for it.
func (d *Demand) WantUngated(k Key) (release func()) { return d.want(k, 0) }

func (d *Demand) want(k Key, gating int) (release func()) {
	d.mu.Lock()
	w := d.wants[k]
	if w == nil {
		w = &want{}
		d.wants[k] = w
		if probe := d.servers[k.Check]; probe != nil {
			w.stop = probe(k)
		}
	}
	w.refs++
	w.gating += gating
	d.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			w.gating -= gating
			if w.refs--; w.refs > 0 {
				return
			}
			delete(d.wants, k)
			if w.stop != nil {
				w.stop()
			}
		})
	}
}

// Gates reports whether a consumer that answers from k wants it (Want, not WantUngated): the
// instance's readiness then waits for k's first verdict (H-2).
func (d *Demand) Gates(k Key) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.wants[k]
	return w != nil && w.gating > 0
}

// Serve makes probe the prober of check in this instance until cancel is called: probe is called
// for every pair wanted with check, now and later, and the stop it returns when the pair is no
// longer wanted or at cancel. One block defines a check (DefineCheck), so one serves it. probe and
// its stops run with the Demand locked: they must not call back into it.
func (d *Demand) Serve(check string, probe func(Key) (stop func())) (cancel func()) {
	d.mu.Lock()
	d.servers[check] = probe
	for k, w := range d.wants {
		if k.Check == check {
			w.stop = probe(k)
		}
	}
	d.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			delete(d.servers, check)
			for k, w := range d.wants {
				if k.Check == check && w.stop != nil {
					w.stop()
					w.stop = nil
				}
			}
		})
	}
}
