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

type fqdnEntry struct {
	addrs   []netip.Addr
	rk      *ranker
	held    map[netip.Addr]*health.Target // P-4: board entries of addrs, released with rk
	refresh time.Time
	expires time.Time
}

type fqdnCache struct {
	slots      []atomic.Pointer[fqdnEntry] // index: region ID + 1
	refreshing []atomic.Bool
	mu         sync.Mutex // serializes cold lookups
}

func newFQDNCache(regions int) *fqdnCache {
	return &fqdnCache{slots: make([]atomic.Pointer[fqdnEntry], regions+1), refreshing: make([]atomic.Bool, regions+1)}
}

// fqdnRanker returns the candidate set for the FQDN's addresses as seen from region from.
func (o *Outbound) fqdnRanker(ctx context.Context, state request.Request, from region.ID) (*ranker, error) {
	k := int(from) + 1
	slot := &o.fq.slots[k]
	e := slot.Load()
	now := o.now()
	if e != nil && now.Before(e.refresh) {
		return e.rk, nil
	}
	if e != nil && now.Before(e.expires) {
		// Refresh before expiry: one query does it, the others keep the current entry.
		if !o.fq.refreshing[k].CompareAndSwap(false, true) {
			return e.rk, nil
		}
		defer o.fq.refreshing[k].Store(false)
		ne, err := o.lookupFQDN(ctx, state, from, e)
		if err != nil {
			log.Warningf("Refreshing target %s for region %s failed, keeping %v: %v", o.fqdn, o.loc.Table.Name(from), e.addrs, err)
			ne = &fqdnEntry{addrs: e.addrs, rk: e.rk, held: e.held, refresh: now.Add(retryRefresh), expires: e.expires}
		}
		return o.fq.swap(o, slot, e, ne), nil
	}
	if ctx.Value(selfLookupKey{}) != nil {
		return nil, errSelfLoop // before locking: the outer lookup holds the lock
	}
	o.fq.mu.Lock()
	defer o.fq.mu.Unlock()
	if e2 := slot.Load(); e2 != e && e2 != nil && o.now().Before(e2.expires) {
		return e2.rk, nil
	}
	ne, err := o.lookupFQDN(ctx, state, from, e)
	if err != nil {
		return nil, err
	}
	return o.fq.swap(o, slot, e, ne), nil
}

// swap installs e in slot in place of old and returns the ranker in the slot. What the entry
// that goes holds (its ranker's pairs, the board entries of its addresses) is given back, unless
// the entry that stays carries it on (same addresses). When another query replaced old first, e
// goes.
func (fc *fqdnCache) swap(o *Outbound, slot *atomic.Pointer[fqdnEntry], old, e *fqdnEntry) *ranker {
	if !slot.CompareAndSwap(old, e) {
		if old == nil || e.rk != old.rk {
			o.dropEntry(e)
		}
		if cur := slot.Load(); cur != nil {
			return cur.rk
		}
		return old.rk
	}
	if old != nil && old.rk != e.rk {
		o.dropEntry(old)
	}
	return e.rk
}

func (o *Outbound) dropEntry(e *fqdnEntry) {
	o.dropRanker(e.rk)
	for _, t := range e.held {
		o.board.Release(t)
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
	if prev != nil && slices.Equal(prev.addrs, addrs) {
		e.rk, e.held = prev.rk, prev.held
	} else {
		targets := make([]netip.AddrPort, len(addrs))
		e.held = make(map[netip.Addr]*health.Target, len(addrs))
		for i, a := range addrs {
			targets[i] = netip.AddrPortFrom(a, o.fqdnPort)
			// P-4 holds for resolved targets too: a pschealth destination's state is seen.
			e.held[a] = o.board.Acquire(health.Key{Addr: a})
		}
		e.rk = o.newRanker(targets, e.held, from)
	}
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
