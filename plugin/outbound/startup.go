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
	for _, s := range o.servers {
		for _, z := range o.zones {
			o.series = append(o.series, seriesKey{server: s, zone: z})
			for _, e := range o.endpoints {
				o.series = append(o.series, seriesKey{server: s, zone: z, endpoint: e.Name})
			}
		}
	}
	for _, k := range o.series {
		retainSeries(k)
	}
	o.bound = true
	if o.fqdn != "" {
		o.fq = newFQDNCache(o.loc.Table.Len())
		return nil
	}
	// P-4: a target that is a pschealth destination (or any published virtual IP) carries its
	// composite state; an unhealthy one is ranked below every healthy one.
	o.held = make(map[netip.Addr]*health.Target, len(o.targets))
	for _, t := range o.targets {
		if _, ok := o.held[t.Addr()]; !ok {
			o.held[t.Addr()] = o.board.Acquire(health.Key{Addr: t.Addr()})
		}
	}
	o.rk = o.newRanker(o.targets, o.held, o.loc.Server())
	return nil
}

// newRanker builds the candidate set of every endpoint towards every target, holding each pair
// and the metric series of each pair in this block's zones (its rank for region from) until
// dropRanker. held gives the board entry of each target address (P-4); a missing one is unchecked.
func (o *Outbound) newRanker(targets []netip.AddrPort, held map[netip.Addr]*health.Target, from region.ID) *ranker {
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
			health = append(health, held[t.Addr()])
		}
	}
	rk := newRanker(pairs, regions, o.loc.Table, o.now)
	rk.health, rk.from = health, from
	for _, p := range pairs {
		for _, s := range o.servers {
			for _, z := range o.zones {
				rk.series = append(rk.series, seriesKey{server: s, zone: z, endpoint: p.ep.Name, target: p.dstStr},
					seriesKey{server: s, zone: z, region: o.loc.Table.Name(from), endpoint: p.ep.Name, target: p.dstStr})
			}
		}
	}
	for _, k := range rk.series {
		retainSeries(k)
	}
	return rk
}

// dropRanker gives back what newRanker took.
func (o *Outbound) dropRanker(rk *ranker) {
	for _, k := range rk.series {
		releaseSeries(k)
	}
	for _, p := range rk.pairs {
		p.ep.release(p)
	}
}

// rankers returns the rankers in use: the static targets', or the FQDN target's of every region
// it was resolved for.
func (o *Outbound) rankers() []*ranker {
	if o.rk != nil {
		return []*ranker{o.rk}
	}
	var out []*ranker
	if o.fq != nil {
		for i := range o.fq.slots {
			if e := o.fq.slots[i].Load(); e != nil {
				out = append(out, e.rk)
			}
		}
	}
	return out
}

func (o *Outbound) start() error {
	o.stopc = make(chan struct{})
	o.wg.Add(1)
	go o.exploreLoop(o.stopc)
	o.started.Store(true)
	return nil
}

// stop gives back everything bind and start took, once. Queries still in flight keep o.rk:
// their pairs are closed under them (errClosed, not recorded).
func (o *Outbound) stop() {
	o.started.Store(false)
	if o.stopc != nil {
		close(o.stopc)
		o.wg.Wait()
		o.stopc = nil
	}
	if !o.bound {
		return
	}
	o.bound = false
	if o.rk != nil {
		o.dropRanker(o.rk)
	}
	for a, t := range o.held {
		o.board.Release(t)
		delete(o.held, a)
	}
	if o.fq != nil {
		for i := range o.fq.slots {
			if e := o.fq.slots[i].Swap(nil); e != nil {
				o.dropEntry(e)
			}
		}
	}
	for _, k := range o.series {
		releaseSeries(k)
	}
	o.series = nil
}
