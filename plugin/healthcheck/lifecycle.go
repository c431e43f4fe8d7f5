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
)

// running is what an instance holds between OnStartup and OnShutdown.
type running struct {
	runs     map[string]*checkRun // this block's checks, for probes asked for later (Probe)
	probes   []binding
	vips     []*vipState
	backends map[health.Key]bool // keys whose changes move a VIP

	kick        chan struct{}
	quit, done  chan struct{}
	unsubscribe func()

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
	backends []*health.Target
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

// OnStartup acquires and publishes the targets of this block's checks that consumers want, and
// the VIPs of its load balancers, and starts probing (through the process-wide registry).
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
	runs := make(map[string]*checkRun, len(h.cfg.checks))
	for _, ch := range h.cfg.checks {
		runs[ch.Name] = newCheckRun(ch)
	}
	h.reg.start()
	run := &running{runs: runs, backends: make(map[health.Key]bool)}
	// H-3: the demand of the whole Corefile is deduplicated, and the registry deduplicates
	// across instances, so each (check, target) has one probe.
	for _, k := range h.demand.Wanted() {
		cr := runs[k.Check]
		if cr == nil {
			continue // another block's check, or a derived key
		}
		run.probes = append(run.probes, h.bind(cr, k))
	}
	for _, lb := range h.cfg.lbs {
		v := &vipState{lb: lb, vip: h.board.Acquire(health.Key{Addr: lb.VIP})}
		h.board.Publish(v.vip)
		acquireVIPSeries(lb.VIP)
		for _, k := range lb.keys() {
			v.backends = append(v.backends, h.board.Acquire(k))
			run.backends[k] = true
		}
		run.vips = append(run.vips, v)
		h.derive(v)
	}
	if len(run.vips) > 0 {
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
		go h.loop(run)
	}
	h.cur.Store(run)
	for name := range runs {
		h.board.SetProber(name, h)
	}
	return nil
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

// derive sets the state of a VIP from its backends (HC-4). A VIP that had a verdict keeps it
// while a new backend has none yet.
func (h *HealthCheck) derive(v *vipState) {
	st, reason := v.lb.derive(v.backends)
	if st != health.Unknown {
		old := v.vip.Status()
		if h.board.Set(v.vip, st, reason) {
			transitions.WithLabelValues("", st.String()).Inc()
			log.Infof("Loadbalancer %s: %s -> %s (%s)", v.lb.VIP, old.State, st, reason)
		}
	}
	targetState.WithLabelValues("", v.lb.VIP.String()).Set(float64(v.vip.State()))
}

// OnShutdown releases everything OnStartup took; probes no other instance wants stop at once.
func (h *HealthCheck) OnShutdown() error {
	h.dynMu.Lock()
	run := h.cur.Swap(nil)
	h.dynMu.Unlock()
	if run == nil {
		return nil
	}
	for name := range run.runs {
		h.board.ClearProber(name, h)
	}
	if run.unsubscribe != nil {
		run.unsubscribe()
		close(run.quit)
		<-run.done
	}
	for _, b := range run.probes {
		h.unbind(b)
	}
	for _, v := range run.vips {
		h.board.Unpublish(v.vip)
		h.board.Release(v.vip)
		releaseVIPSeries(v.lb.VIP)
		for _, t := range v.backends {
			h.board.Release(t)
		}
	}
	h.reg.stop()
	return nil
}

// vipSeries counts the instances publishing each VIP, so a reload does not delete the series
// the new instance has just set.
var vipSeries = struct {
	sync.Mutex
	refs map[netip.Addr]int
}{refs: make(map[netip.Addr]int)}

func acquireVIPSeries(a netip.Addr) {
	vipSeries.Lock()
	vipSeries.refs[a]++
	vipSeries.Unlock()
}

func releaseVIPSeries(a netip.Addr) {
	vipSeries.Lock()
	defer vipSeries.Unlock()
	if vipSeries.refs[a]--; vipSeries.refs[a] <= 0 {
		delete(vipSeries.refs, a)
		targetState.DeleteLabelValues("", a.String())
	}
}

// rederive asks the VIP loop to derive every VIP of h again.
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
