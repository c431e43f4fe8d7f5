// Package routingpolicy serves authoritative zones whose record sets carry routing policies:
// weighted round robin, geolocation (with fencing) and failover (with trickle), answering from the
// healthy addresses the health board reports. The design and the rules its tests name (R-ZONE-*,
// R-WRR-*, R-GEO-*, R-FO-*, R-SEC-1, L-1 to L-3, H-1 to H-6) are in docs/DESIGN.md of the repository.
package routingpolicy

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metadata"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/coredns/coredns/request"
	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/region"

	"github.com/miekg/dns"
)

// RoutingPolicy is the handler of one routingpolicy block.
type RoutingPolicy struct {
	cfg    *Config
	data   atomic.Pointer[data]
	board  *health.Board
	demand *health.Demand // the Corefile instance's: checks defined, probes wanted
	gen    uint64         // the instance's lifecycle.Generation: the newest writes the shares
	// rnd returns uniform 64-bit values. The default is math/rand/v2's runtime source, which has
	// per-thread state and no lock; tests set a seeded one.
	rnd func() uint64
	// mdRegion holds the metadata value function of every region (index id+1).
	mdRegion []func() string
	// packed is set when answers are written as packed bytes (writePacked): no plugin before us
	// in the server block needs their dns.Msg (packedPath). Set by OnStartup, before serving.
	packed bool

	mu      sync.Mutex // guards the fields below (lifecycle, not queries)
	stop    chan struct{}
	done    chan struct{}
	started bool
	held    *holdings // what the served data declared, while started
	dnssec  bool      // dnssec is in the server block: R-SEC-1 applies to reloaded data too
	fwd     forwarder // outbound in the server block: reloaded data is checked against it too
	stamps  [2]fileStamp
	server  string // the server block, for the status page

	Next plugin.Handler
}

// New returns a handler for cfg serving d.
func New(cfg *Config, d *data) *RoutingPolicy {
	rp := &RoutingPolicy{cfg: cfg, board: health.Default, demand: health.NewDemand(), rnd: rand.Uint64}
	rp.data.Store(d)
	t := cfg.Locator.Table
	rp.mdRegion = make([]func() string, t.Len()+1)
	for id := -1; id < t.Len(); id++ {
		name := t.Name(region.ID(id))
		rp.mdRegion[id+1] = func() string { return name }
	}
	rp.stamps = d.stamps
	return rp
}

// Name implements plugin.Handler.
func (rp *RoutingPolicy) Name() string { return "routingpolicy" }

// ServeDNS implements plugin.Handler.
func (rp *RoutingPolicy) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	state := request.Request{W: w, Req: r}
	qname := queryName(&state)
	d := rp.data.Load()
	z := d.match(qname)
	if z == nil {
		if rp.Next == nil {
			// As file: an authoritative server refuses a name it has no zone for (and a CNAME
			// chased here from another zone stays the answer, chase.go).
			return dns.RcodeRefused, nil
		}
		return plugin.NextOrFailure(rp.Name(), rp.Next, ctx, w, r)
	}
	qtype := state.QType()
	if qtype == dns.TypeAXFR || qtype == dns.TypeIXFR {
		return dns.RcodeRefused, nil
	}

	loop := loopCount(ctx)
	if loop > maxRestarts && (qname != z.origin || qtype != dns.TypeNS && qtype != dns.TypeSOA) {
		// As file: the 9th time a CNAME chain comes back through the server, it is a loop (the
		// apex SOA and NS are answered before that count).
		return dns.RcodeServerFailure, nil
	}

	src := source{loc: rp.cfg.Locator, w: w, r: r, public: rp.cfg.Public, id: region.None}
	sc := scratches.Get().(*scratch)
	// The reply and the used policies are pooled, not on this frame: the goroutine's stack stays
	// small (see scratch).
	rep := &sc.rep
	rep.an, rep.restarts = sc.an, loop
	buf := sc.buf
	defer func() { sc.put(rep.an, buf) }()
	used := &sc.used
	z.lookup(rep, qname, qtype, &src, rp.rnd, used)
	if rep.out {
		chase(ctx, &state, rep, z)
	}
	if rep.nsDO != nil && state.Do() {
		rep.ns = rep.nsDO
	}

	if rep.rcode == dns.RcodeNameError && len(rep.an) == 0 && rp.cfg.Fall.Through(qname) {
		return plugin.NextOrFailure(rp.Name(), rp.Next, ctx, w, r)
	}

	var ecs *dns.EDNS0_SUBNET
	if rep.n > 0 {
		rp.account(ctx, used[:rep.n], src.id)
		// L-1: an answer that used the client subnet carries its scope (RFC 7871).
		ecs = src.src.ECS
		if rp.cfg.Log {
			rp.logAnswer(state, used[:rep.n], src.region())
		}
	}
	if ecs == nil {
		// What a chase found used the client's subnet: the answer carries its scope. (Both come
		// from the query's option, so when both are set they are the same.)
		ecs = rep.ecs
	}
	if rp.packed {
		var ok bool
		if buf, ok = writePacked(w, r, rep, ecs, buf, &sc.direct); ok {
			return dns.RcodeSuccess, nil
		}
	}
	m := rep.msg(r)
	if ecs != nil {
		m.SetEdns0(dns.MinMsgSize, false)
		o := m.IsEdns0()
		o.Option = append(o.Option, region.ScopeOption(ecs))
	}
	state.SizeAndDo(m)
	w.WriteMsg(m)
	return dns.RcodeSuccess, nil
}

// queryName is the name of the query in the form the zones key names (ServeDNS and explain): lower
// case, in the form unpacking gives. It is request.Request.Name, whose dns.Name.String rewrites
// every name it is given (a fifth of ServeDNS's time), without that for a name of printable ASCII
// without escapes, most names, which it leaves as it is.
func queryName(state *request.Request) string {
	if q := state.Req.Question; len(q) > 0 && printable(q[0].Name) {
		return strings.ToLower(q[0].Name)
	}
	qname := state.Name()
	if strings.IndexByte(qname, '\\') >= 0 && !wireEscaped(qname) {
		// A name built in the server, not unpacked from the wire (`\097bc` for `abc`): the zone's
		// names are in wire-unpacked form, as file's comparison of names would see them.
		qname = canonicalName(qname)
	}
	return qname
}

// account sets metadata and metrics for the policies that answered.
func (rp *RoutingPolicy) account(ctx context.Context, us []used, src region.ID) {
	server := metrics.WithServer(ctx)
	for i := range us {
		p, o := us[i].p, &us[i].o
		inc(o.it.served, itemSeries, answersTotal, server, p.zone, p.label, o.it.label, p.kind.String())
		if o.failOpen {
			inc(&p.failOpen, setSeries, failOpenTotal, server, p.zone, p.label)
		}
		if o.fallback {
			inc(&p.fallback, setSeries, geoFallbacksTotal, server, p.zone, p.label)
		}
	}
	last := &us[len(us)-1]
	metadata.SetValueFunc(ctx, "routingpolicy/policy", last.p.mdPolicy)
	metadata.SetValueFunc(ctx, "routingpolicy/item", last.o.it.mdItem)
	if i := int(src) + 1; i >= 0 && i < len(rp.mdRegion) {
		metadata.SetValueFunc(ctx, "routingpolicy/region", rp.mdRegion[i])
	}
}

// OnStartup acquires the board targets, checks the server block for dnssec (R-SEC-1) and
// outbound, declares the data (probe demand, metric series) and starts the reload loop.
func (rp *RoutingPolicy) OnStartup(conf *dnsserver.Config) error {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.started {
		return nil
	}
	d := rp.data.Load()
	d.acquire(rp.board)
	if conf != nil {
		if conf.Handler("dnssec") != nil {
			rp.dnssec = true
			// R-SEC-1, now that the board knows which addresses are derived VIPs.
			if err := d.checkDNSSEC(); err != nil {
				d.release(rp.board)
				return plugin.Error("routingpolicy", err)
			}
		}
		if f, ok := conf.Handler("outbound").(forwarder); ok {
			rp.fwd = f
			if err := d.checkForwarded(f); err != nil {
				d.release(rp.board)
				return plugin.Error("routingpolicy", err)
			}
		}
		if conf.Handler("cache") != nil && len(d.policies) > 0 {
			log.Warningf("cache is in the server block of %v: it does not key on the client's region, so one region's answer is served to every region until it expires", rp.cfg.Zones)
		}
		var why string
		if rp.packed, why = packedPath(conf); rp.packed {
			log.Debugf("Answers for %v are written as packed bytes", rp.cfg.Zones)
		} else {
			log.Debugf("Answers for %v are written with WriteMsg: %s", rp.cfg.Zones, why)
		}
	}
	rp.held = d.declare(rp.demand, rp.gen)
	d.logOccluded() // the data is served from now on
	zoneSeries.Hold(rp.cfg.Zones[0])
	rp.started = true
	if rp.cfg.Reload > 0 && (rp.cfg.ZoneFile != "" || rp.cfg.RecordSets != "") {
		rp.stop = make(chan struct{})
		rp.done = make(chan struct{})
		go rp.reloadLoop(rp.cfg.Reload, rp.stop, rp.done)
	}
	return nil
}

// OnShutdown stops the reload loop and gives back what the served data took. It also runs when
// a failed reload abandons this instance (plugin/pkg/lifecycle).
func (rp *RoutingPolicy) OnShutdown() error {
	rp.mu.Lock()
	stop, done := rp.stop, rp.done
	rp.stop, rp.done = nil, nil
	rp.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.started {
		rp.held.withdraw()
		rp.data.Load().release(rp.board)
		zoneSeries.Release(rp.cfg.Zones[0])
		rp.held, rp.started = nil, false
	}
	return nil
}

func (rp *RoutingPolicy) reloadLoop(every time.Duration, stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			rp.reloadIfChanged(time.Now())
		}
	}
}

// reloadIfChanged re-reads the files when one changed. A broken file keeps the last good data.
// New data passes the checks of the Corefile's (R-ZONE-3: a check it names must be defined, no
// policy on a name outbound forwards, R-SEC-1 with dnssec) before it is declared and served; then
// the old data withdraws, so an address the files no longer name stops being probed at once (H-6).
func (rp *RoutingPolicy) reloadIfChanged(now time.Time) bool {
	stamps := [2]fileStamp{stampOf(rp.cfg.ZoneFile), stampOf(rp.cfg.RecordSets)}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if stamps == rp.stamps {
		return false
	}
	rp.stamps = stamps
	zone := rp.cfg.Zones[0]
	refuse := func(what string, err error) bool {
		reloadsTotal.WithLabelValues(zone, "failure").Inc()
		log.Errorf("Reload of %v %s, serving the last good data: %v", rp.cfg.Zones, what, err)
		return false
	}
	d, err := rp.cfg.load(now)
	if err != nil {
		return refuse("failed", err)
	}
	rp.stamps = d.stamps // what was read, stamped before the read (as New)
	if err := d.checkChecks(rp.demand); err != nil {
		return refuse("refused", err)
	}
	if rp.fwd != nil {
		if err := d.checkForwarded(rp.fwd); err != nil {
			return refuse("refused", err)
		}
	}
	if !rp.started {
		rp.data.Store(d) // OnStartup will acquire and declare it
	} else {
		d.acquire(rp.board)
		if rp.dnssec {
			if err := d.checkDNSSEC(); err != nil {
				d.release(rp.board)
				return refuse("refused", err)
			}
		}
		held := d.declare(rp.demand, rp.gen)
		old := rp.data.Swap(d)
		rp.held.withdraw()
		old.release(rp.board)
		rp.held = held
	}
	reloadsTotal.WithLabelValues(zone, "success").Inc()
	log.Infof("Reloaded %v: %d policy record sets", rp.cfg.Zones, len(d.policies))
	if rp.started {
		d.logOccluded() // else OnStartup does, once it has checked the data
	}
	return true
}
