package healthcheck

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"
	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/lifecycle"
)

// vipWriters orders the instances that publish a VIP: the newest derives it.
var vipWriters = lifecycle.NewWriters()

// running is what a block holds between OnStartup and OnShutdown.
type running struct {
	serving  []func() // one per check of the block: stops serving it (health.Demand.Serve)
	wants    []func() // the load balancers' wants of their backends
	vips     []*vipState
	backends map[health.Key]bool // keys whose changes move a VIP

	mu    sync.Mutex
	bound map[*health.Target]int // what the block probes now, for Ready

	kick        chan struct{}
	quit, done  chan struct{}
	unsubscribe func()

	fleet     *fleet // the process's membership, while the block has a fleet
	fleetView *fleetView

	ready atomic.Bool
}

// binding is one board target written by one probe.
type binding struct {
	p   *probe
	run *checkRun
	t   *health.Target
}

// bind acquires and publishes the board target of k and has the registry probe it with cr,
// once however many ask (H-3).
func (h *HealthCheck) bind(cr *checkRun, k health.Key) binding {
	port := k.Port
	if port == 0 {
		port = cr.check.Port
	}
	t := h.board.Acquire(k)
	h.board.Publish(t)
	p := h.reg.acquire(cr, netip.AddrPortFrom(k.Addr, port))
	h.reg.attach(p, t)
	return binding{p: p, run: cr, t: t}
}

// unbind gives back what bind took; the last reference stops the probe at once (H-4).
func (h *HealthCheck) unbind(b binding) {
	h.reg.detach(b.p, b.t)
	h.reg.release(b.p, b.run)
	h.board.Unpublish(b.t)
	h.board.Release(b.t)
}

// vipState is a load balancer as one instance publishes it.
type vipState struct {
	lb       *Loadbalancer
	vip      *health.Target
	writer   *lifecycle.Writer // this instance's turn to write the VIP (vipWriters)
	backends []*health.Target
	// rewrite is set when this instance becomes the newest writer again (a failed reload's
	// instance left): its next derive writes what it computes even when that is Unknown.
	rewrite atomic.Bool
}

// validate checks what setup could not: a load balancer may name a check of a server block
// that was set up after its own.
func (h *HealthCheck) validate() error {
	for _, lb := range h.cfg.lbs {
		if lb.Check != "" && !h.demand.HasCheck(lb.Check) {
			defined := strings.Join(h.demand.Checks(), ", ")
			if defined == "" {
				defined = "none"
			}
			return fmt.Errorf("loadbalancer %s: check %q is not defined in any healthcheck block (defined: %s)", lb.VIP, lb.Check, defined)
		}
	}
	return nil
}

// OnStartup serves this block's checks on the instance's Demand, so every (check, target) a
// consumer wants with them, now or later, is probed (through the process-wide registry), and
// publishes the VIPs of its load balancers, wanting their backends probed.
func (h *HealthCheck) OnStartup() error {
	if h.cur.Load() != nil {
		return nil
	}
	// Validate every block of the instance before the first one starts, so a refused Corefile
	// starts nothing.
	members := []*HealthCheck{h}
	if h.group != nil {
		members = h.group.all()
	}
	for _, m := range members {
		if err := m.validate(); err != nil {
			return plugin.Error("healthcheck", err)
		}
	}
	h.reg.start()
	run := &running{backends: make(map[health.Key]bool), bound: make(map[*health.Target]int)}
	h.cur.Store(run)
	var fr *fleetRun
	if fc := h.cfg.fleet; fc != nil {
		// F-4: joining never waits for etcd; until it is joined the block's checks are decided here.
		run.fleetView = newFleetView(h.cfg.checks)
		run.fleet = joinFleet(fc, run.fleetView)
		fr = &fleetRun{f: run.fleet, perRegion: fc.ReplicasPerRegion}
	}
	for _, ch := range h.cfg.checks {
		cr := newCheckRun(ch)
		cr.fleet = fr
		checkSeries.Hold(ch.Name)
		for _, reg := range ch.Regions {
			regionSeries.Hold(ch.Name, reg.Name)
		}
		// H-6: the one way a probe starts and stops. H-3: the Demand counts the consumers of one
		// instance, the registry the instances.
		run.serving = append(run.serving, h.demand.Serve(ch.Name, func(k health.Key) func() {
			b := h.bind(cr, k)
			run.track(b.t, 1)
			return func() {
				run.track(b.t, -1)
				h.unbind(b)
			}
		}))
	}
	if len(h.cfg.lbs) > 0 {
		// Subscribe before the first derive, so a backend verdict that lands in between wakes
		// the loop instead of being lost (the VIP would wait for the next change).
		for _, lb := range h.cfg.lbs {
			for _, k := range lb.keys() {
				run.backends[k] = true
			}
		}
		run.kick = make(chan struct{}, 1)
		run.quit = make(chan struct{})
		run.done = make(chan struct{})
		run.unsubscribe = h.board.Subscribe(func(c health.Change) {
			if run.backends[c.Key] {
				select { // never block the writer
				case run.kick <- struct{}{}:
				default:
				}
			}
		})
	}
	for _, lb := range h.cfg.lbs {
		v := &vipState{lb: lb, vip: h.board.Acquire(health.Key{Addr: lb.VIP})}
		h.board.Publish(v.vip)
		v.writer = vipWriters.Join(v.vip, h.gen, func() {
			v.rewrite.Store(true)
			h.rederive()
		})
		vipSeries.Hold("", lb.VIP.String())
		checkSeries.Hold("") // state_transitions_total of the VIPs
		for _, k := range lb.keys() {
			v.backends = append(v.backends, h.board.Acquire(k))
			run.wants = append(run.wants, h.demand.Want(k))
		}
		run.vips = append(run.vips, v)
		h.derive(v)
	}
	if len(run.vips) > 0 {
		go h.loop(run)
	}
	return nil
}

// track counts the targets the block probes.
func (run *running) track(t *health.Target, n int) {
	run.mu.Lock()
	defer run.mu.Unlock()
	if run.bound[t] += n; run.bound[t] <= 0 {
		delete(run.bound, t)
	}
}

// loop recomputes the VIPs when a backend changes. The board calls subscribers on the writer's
// goroutine, so the work is done here rather than in the callback.
func (h *HealthCheck) loop(run *running) {
	defer close(run.done)
	for {
		select {
		case <-run.kick:
			for _, v := range run.vips {
				h.derive(v)
			}
		case <-run.quit:
			return
		}
	}
}

// derive sets the state of a VIP from its backends (HC-4), when this instance is the newest that
// publishes it: during a reload the new configuration's backends decide. A VIP that had a verdict
// keeps it while the backends without one could still change the outcome, unless the verdict is
// an abandoned newer instance's: then this instance's result stands, Unknown included (H-6).
func (h *HealthCheck) derive(v *vipState) {
	st, reason := v.lb.derive(v.backends)
	v.writer.Write(func() {
		if rewrite := v.rewrite.Swap(false); st != health.Unknown || rewrite {
			old := v.vip.Status()
			if h.board.Set(v.vip, st, reason) {
				transitions.WithLabelValues("", st.String()).Inc()
				log.Infof("Loadbalancer %s: %s -> %s (%s)", v.lb.VIP, old.State, st, reason)
			}
		}
		targetState.WithLabelValues("", v.lb.VIP.String()).Set(float64(v.vip.State()))
	})
}

// OnShutdown gives back everything OnStartup took: probes no other instance wants stop at once,
// and the series of the VIPs and checks no other instance has go.
func (h *HealthCheck) OnShutdown() error {
	run := h.cur.Swap(nil)
	if run == nil {
		return nil
	}
	if run.unsubscribe != nil {
		run.unsubscribe()
		close(run.quit)
		<-run.done
	}
	for _, release := range run.wants {
		release()
	}
	for _, stop := range run.serving {
		stop()
	}
	for _, v := range run.vips {
		v.writer.Leave()
		h.board.Unpublish(v.vip)
		h.board.Release(v.vip)
		vipSeries.Release("", v.lb.VIP.String())
		checkSeries.Release("")
		for _, t := range v.backends {
			h.board.Release(t)
		}
	}
	for _, ch := range h.cfg.checks {
		checkSeries.Release(ch.Name)
		for _, reg := range ch.Regions {
			regionSeries.Release(ch.Name, reg.Name)
		}
	}
	if run.fleet != nil {
		run.fleet.leave(run.fleetView)
	}
	h.reg.stop()
	return nil
}

// rederive asks the VIP loop to derive every VIP of h again: a newer instance that wrote one of
// them has left (a failed reload).
func (h *HealthCheck) rederive() {
	if run := h.cur.Load(); run != nil && run.kick != nil {
		select {
		case run.kick <- struct{}{}:
		default:
		}
	}
}

// group is the healthcheck blocks of one Corefile instance.
type group struct {
	mu      sync.Mutex
	fleet   bool
	vips    map[netip.Addr]bool
	members []*HealthCheck
}

type groupKey struct{}

// groupOf returns the group of the instance c is setting up.
func groupOf(c *caddy.Controller) *group {
	if g, ok := c.Get(groupKey{}).(*group); ok {
		return g
	}
	g := &group{vips: make(map[netip.Addr]bool)}
	c.Set(groupKey{}, g)
	return g
}

func (g *group) all() []*HealthCheck {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*HealthCheck(nil), g.members...)
}

func (g *group) add(h *HealthCheck) {
	g.mu.Lock()
	g.members = append(g.members, h)
	g.mu.Unlock()
}

// claimFleet reports whether no other block of this instance has a fleet.
func (g *group) claimFleet() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fleet {
		return false
	}
	g.fleet = true
	return true
}

// claimVIP reports whether a is not yet a VIP of another block of this instance.
func (g *group) claimVIP(a netip.Addr) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.vips[a] {
		return false
	}
	g.vips[a] = true
	return true
}
