package outbound

import (
	"fmt"
	"net/netip"

	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/region"
)

// What a block takes at startup and gives back at shutdown. Both run through plugin/pkg/lifecycle
// (setup.go), so a reload that fails after this startup gives everything back as a shutdown does:
// pairs (sockets and ranking state), board entries, metric series, the prober.

// bind resolves the endpoint names against the instance's registry (O-9) and their sources
// against this host (O-2), and builds the rankers. Without endpoints the zone uses one default
// endpoint whose source is source_address, or the kernel's choice. It takes nothing when it fails.
func (o *Outbound) bind(reg *registry) error {
	o.endpoints = o.endpoints[:0]
	for _, n := range o.endpointNames {
		e := reg.lookup(n)
		if e == nil {
			return fmt.Errorf("endpoint %q is named but declared nowhere (declare it with endpoint %s REGION SOURCE...)", n, n)
		}
		if _, err := o.loc.Table.Resolve(e.Region); err != nil {
			return fmt.Errorf("endpoint %s: %w", n, err)
		}
		if err := e.resolve(interfaceAddrs); err != nil {
			return err
		}
		o.endpoints = append(o.endpoints, e)
	}
	if len(o.endpoints) == 0 {
		e := &Endpoint{Name: "default", Region: o.loc.Table.Name(o.loc.Server())}
		if o.sourceAddress.IsValid() {
			e.Sources = []netip.Prefix{netip.PrefixFrom(o.sourceAddress, 32)}
		}
		if err := e.resolve(interfaceAddrs); err != nil {
			return err
		}
		o.endpoints = append(o.endpoints, e)
	}
	o.servers = serverLabels(o.cfg)
	o.series = o.zoneSeries()
	holdAll(o.series)
	o.bound = true
	if o.fqdn != "" {
		o.fq = newFQDNCache(o.loc.Table.Len())
		return nil
	}
	// P-4: a target that is a pschealth destination (or any published virtual IP) carries its
	// composite state; an unhealthy one is ranked below every healthy one.
	held := make(map[netip.Addr]*health.Target, len(o.targets))
	for _, t := range o.targets {
		if _, ok := held[t.Addr()]; !ok {
			held[t.Addr()] = o.board.Acquire(health.Key{Addr: t.Addr()})
		}
	}
	o.rk = o.newRanker(o.targets, held, o.loc.Server())
	return nil
}

// zoneSeries names the series of this block's zones and of its endpoints in them.
func (o *Outbound) zoneSeries() []held {
	hs := make([]held, 0, (1+len(o.endpoints))*len(o.zones)*len(o.servers))
	for _, s := range o.servers {
		for _, z := range o.zones {
			hs = append(hs, held{zoneSeries, []string{s, z}})
			for _, e := range o.endpoints {
				hs = append(hs, held{endpointSeries, []string{s, z, e.Name}})
			}
		}
	}
	return hs
}

// newRanker builds the candidate set of every endpoint towards every target. It takes each pair,
// the board entries in boardHeld (the entry of each target address, P-4; a missing one is
// unchecked) and the metric series of the ranker's zones, endpoints and pairs in this block's zones
// (with their rank for region from). Its owner holds the one reference it starts with; the last
// release gives all that back.
func (o *Outbound) newRanker(targets []netip.AddrPort, boardHeld map[netip.Addr]*health.Target, from region.ID) *ranker {
	pairs := make([]*pair, 0, len(o.endpoints)*len(targets))
	regions := make([]region.ID, 0, cap(pairs))
	health := make([]*health.Target, 0, cap(pairs))
	for _, e := range o.endpoints {
		id, ok := o.loc.Table.Lookup(e.Region)
		if !ok {
			id = region.None
		}
		for _, t := range targets {
			pairs = append(pairs, e.acquire(t))
			regions = append(regions, id)
			health = append(health, boardHeld[t.Addr()])
		}
	}
	rk := newRanker(pairs, regions, o.loc.Table, o.now)
	rk.health, rk.from = health, from
	series := o.zoneSeries()
	for _, p := range pairs {
		for _, s := range o.servers {
			for _, z := range o.zones {
				series = append(series, held{pairSeries, []string{s, z, p.ep.Name, p.dstStr}},
					held{rankSeries, []string{s, z, o.loc.Table.Name(from), p.ep.Name, p.dstStr}})
			}
		}
	}
	holdAll(series)
	rk.refs.Store(1)
	rk.free = func() {
		releaseAll(series)
		for _, p := range pairs {
			p.ep.release(p)
		}
		for _, t := range boardHeld {
			o.board.Release(t)
		}
	}
	return rk
}

// rankers returns the rankers in use, acquired: the static targets', or the FQDN target's of every
// region it was resolved for and whose entry has not expired. The caller releases them.
func (o *Outbound) rankers() []*ranker {
	var out []*ranker
	if o.rk != nil {
		if o.rk.acquire() {
			out = append(out, o.rk)
		}
		return out
	}
	if o.fq != nil {
		now := o.now()
		for i := range o.fq.slots {
			if e := o.fq.slots[i].Load(); e != nil && now.Before(e.expires) && e.rk.acquire() {
				out = append(out, e.rk)
			}
		}
	}
	return out
}

func releaseRankers(rks []*ranker) {
	for _, rk := range rks {
		rk.release()
	}
}

func (o *Outbound) start() error {
	o.stopc = make(chan struct{})
	o.wg.Add(1)
	go o.exploreLoop(o.stopc)
	o.started.Store(true)
	return nil
}

// stop gives back everything bind and start took, once. Queries still in flight hold their
// ranker: what it holds goes when the last of them ends.
func (o *Outbound) stop() {
	o.started.Store(false)
	if o.stopc != nil {
		close(o.stopc)
		o.wg.Wait()
		o.stopc = nil
	}
	o.stopProbes()
	if !o.bound {
		return
	}
	o.bound = false
	if o.rk != nil {
		o.rk.release()
	}
	if o.fq != nil {
		o.fq.stop()
	}
	releaseAll(o.series)
	o.series = nil
}
