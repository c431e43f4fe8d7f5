package outbound

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin/pkg/nonwriter"
	"github.com/coredns/coredns/request"
	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/region"

	"github.com/miekg/dns"
)

// O-8: an FQDN target is resolved through this same server, for the querying client: the lookup
// goes down the server's own plugin chain with the client's ResponseWriter (so its RemoteAddr is
// the client's) and a copy of the client's query (so its EDNS Client Subnet option, if any, is
// kept). A routingpolicy geo zone therefore locates the lookup exactly as it would locate the
// client. The answer is cached per source region (this block's `region`/`subnet` mapping) for
// the record's TTL, within [minTTL, maxTTL], and refreshed by the first query after refreshAt of
// the TTL has passed, so entries do not expire under traffic. Its addresses are held to O-1.
const (
	minTTL       = time.Second
	maxTTL       = time.Hour
	refreshAt    = 0.8
	retryRefresh = time.Second // after a failed refresh, the stale entry is kept this long
)

// fqdnEntry is the FQDN's addresses for one region. It holds one reference on its ranker, given
// back when the entry leaves its slot (replaced, expired, or the block stops).
type fqdnEntry struct {
	addrs   []netip.Addr
	rk      *ranker
	refresh time.Time
	expires time.Time
}

type fqdnCache struct {
	slots      []atomic.Pointer[fqdnEntry] // index: region ID + 1; read without locks
	refreshing []atomic.Bool
	mu         sync.Mutex // serializes cold lookups
	swapMu     sync.Mutex // serializes writes to slots with stop
	stopped    bool       // guarded by swapMu: no entry is installed any more
}

func newFQDNCache(regions int) *fqdnCache {
	return &fqdnCache{slots: make([]atomic.Pointer[fqdnEntry], regions+1), refreshing: make([]atomic.Bool, regions+1)}
}

// fqdnRanker returns the candidate set for the FQDN's addresses as seen from region from,
// acquired for the query: the caller releases it.
func (o *Outbound) fqdnRanker(ctx context.Context, state request.Request, from region.ID) (*ranker, error) {
	k := int(from) + 1
	slot := &o.fq.slots[k]
	for {
		e := slot.Load()
		now := o.now()
		switch {
		case e != nil && now.Before(e.refresh):
			if e.rk.acquire() {
				return e.rk, nil
			}
			// The entry left its slot since the load: read it again.
		case e != nil && now.Before(e.expires):
			// Refresh before expiry: one query does it, the others keep the current entry.
			if !o.fq.refreshing[k].CompareAndSwap(false, true) {
				if e.rk.acquire() {
					return e.rk, nil
				}
				continue
			}
			rk, ok := o.refreshFQDN(ctx, state, from, slot, e, now)
			o.fq.refreshing[k].Store(false)
			if ok {
				return rk, nil
			}
		default:
			if ctx.Value(selfLookupKey{}) != nil {
				return nil, errSelfLoop // before locking: the outer lookup holds the lock
			}
			rk, ok, err := o.coldFQDN(ctx, state, from, slot, e)
			if err != nil || ok {
				return rk, err
			}
		}
	}
}

// refreshFQDN looks the FQDN up again for the entry e; a failed lookup keeps e's addresses for
// retryRefresh. ok is false when e left its slot meanwhile.
func (o *Outbound) refreshFQDN(ctx context.Context, state request.Request, from region.ID, slot *atomic.Pointer[fqdnEntry], e *fqdnEntry, now time.Time) (*ranker, bool) {
	ne, err := o.lookupFQDN(ctx, state, from, e)
	if err != nil {
		log.Warningf("Refreshing target %s for region %s failed, keeping %v: %v", o.fqdn, o.loc.Table.Name(from), e.addrs, err)
		if !e.rk.acquire() {
			return nil, false
		}
		ne = &fqdnEntry{addrs: e.addrs, rk: e.rk, refresh: now.Add(retryRefresh), expires: e.expires}
	}
	return o.fq.swap(slot, e, ne), true
}

// coldFQDN looks the FQDN up when the slot holds no usable entry (old, if any, expired). ok is
// false when another query filled the slot first.
func (o *Outbound) coldFQDN(ctx context.Context, state request.Request, from region.ID, slot *atomic.Pointer[fqdnEntry], old *fqdnEntry) (rk *ranker, ok bool, err error) {
	o.fq.mu.Lock()
	defer o.fq.mu.Unlock()
	if e := slot.Load(); e != old {
		return nil, false, nil
	}
	ne, err := o.lookupFQDN(ctx, state, from, old)
	if err != nil {
		return nil, false, err
	}
	return o.fq.swap(slot, old, ne), true, nil
}

// swap installs e in slot in place of old, and returns e's ranker acquired for the caller's query.
// The entry that leaves the slot gives back its reference: when another query replaced old first,
// or after stop, that is e, which then serves only the caller's query.
func (fc *fqdnCache) swap(slot *atomic.Pointer[fqdnEntry], old, e *fqdnEntry) *ranker {
	rk := e.rk
	rk.acquire() // e holds a reference: this cannot fail
	fc.swapMu.Lock()
	gone := e
	if !fc.stopped && slot.CompareAndSwap(old, e) {
		gone = old
	}
	fc.swapMu.Unlock()
	if gone != nil {
		gone.rk.release()
	}
	return rk
}

// prune gives back the entries that expired at now: no client of their region asked again, and
// their addresses may not be the name's any more. They are neither probed nor published.
func (fc *fqdnCache) prune(now time.Time) {
	for i := range fc.slots {
		e := fc.slots[i].Load()
		if e == nil || now.Before(e.expires) {
			continue
		}
		fc.swapMu.Lock()
		gone := fc.slots[i].CompareAndSwap(e, nil)
		fc.swapMu.Unlock()
		if gone {
			e.rk.release()
		}
	}
}

// stop gives back every entry; none is installed after it.
func (fc *fqdnCache) stop() {
	fc.swapMu.Lock()
	fc.stopped = true
	fc.swapMu.Unlock()
	for i := range fc.slots {
		if e := fc.slots[i].Swap(nil); e != nil {
			e.rk.release()
		}
	}
}

var errSelfLoop = errors.New("resolving the FQDN target came back to outbound: nothing in this server answers it")

// lookupFQDN resolves the target name through this server for the client of state, in region from.
func (o *Outbound) lookupFQDN(ctx context.Context, state request.Request, from region.ID, prev *fqdnEntry) (*fqdnEntry, error) {
	if ctx.Value(selfLookupKey{}) != nil {
		return nil, errSelfLoop
	}
	lookup := o.lookup
	if lookup == nil {
		lookup = selfLookup
	}
	resp, err := lookup(context.WithValue(ctx, selfLookupKey{}, true), state, o.fqdn)
	if err != nil {
		return nil, err
	}
	if resp == nil {
		return nil, fmt.Errorf("target %s: no answer", o.fqdn)
	}
	if resp.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("target %s: %s", o.fqdn, rcodeString(resp.Rcode))
	}
	var (
		addrs []netip.Addr
		ttl   = maxTTL
	)
	for _, rr := range resp.Answer {
		a, ok := rr.(*dns.A)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.A)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if !o.isPrivate(ip) {
			// O-1 holds for resolved addresses too.
			log.Warningf("Target %s resolved to public address %s, refused: targets must be private", o.fqdn, ip)
			continue
		}
		addrs = append(addrs, ip)
		ttl = min(ttl, time.Duration(a.Hdr.Ttl)*time.Second)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("target %s: no private IPv4 address", o.fqdn)
	}
	ttl = max(ttl, minTTL)
	slices.SortFunc(addrs, func(a, b netip.Addr) int { return a.Compare(b) })
	addrs = slices.Compact(addrs)
	now := o.now()
	e := &fqdnEntry{addrs: addrs, refresh: now.Add(time.Duration(float64(ttl) * refreshAt)), expires: now.Add(ttl)}
	if prev != nil && slices.Equal(prev.addrs, addrs) && prev.rk.acquire() {
		e.rk = prev.rk
		return e, nil
	}
	targets := make([]netip.AddrPort, len(addrs))
	held := make(map[netip.Addr]*health.Target, len(addrs))
	for i, a := range addrs {
		targets[i] = netip.AddrPortFrom(a, o.fqdnPort)
		// P-4 holds for resolved targets too: a pschealth destination's state is seen.
		held[a] = o.board.Acquire(health.Key{Addr: a})
	}
	e.rk = o.newRanker(targets, held, from)
	return e, nil
}

// selfLookup asks this server for name A, down its own plugin chain, as the client of state.
func selfLookup(ctx context.Context, state request.Request, name string) (*dns.Msg, error) {
	srv, ok := ctx.Value(dnsserver.Key{}).(*dnsserver.Server)
	if !ok {
		return nil, errors.New("no server to resolve the target through")
	}
	req := state.NewWithQuestion(name, dns.TypeA)
	req.Req.Id = newID()
	nw := nonwriter.New(state.W)
	srv.ServeDNS(ctx, nw, req.Req)
	return nw.Msg, nil
}
