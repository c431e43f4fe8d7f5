package outbound

import (
	"hash/fnv"
	"net/netip"
	"sync"
)

// Endpoint is an egress endpoint (O-2): a name, a region and the source addresses queries leave
// from. It is declared once per Corefile instance and shared by every outbound block that names
// it (O-9), with its ranking state and its sockets.
type Endpoint struct {
	Name   string
	Region string
	// Sources as declared: addresses (a /32) or ranges.
	Sources []netip.Prefix

	mu    sync.Mutex
	addrs []netip.Addr // host addresses resolved from Sources at startup (sources.go)
	pairs map[netip.AddrPort]*pair
	err   error // why the sources cannot be used, set at startup
	init  bool
}

// acquire returns the ranking and transport state of e towards target, creating it on first use.
// Every acquire is matched by a release: the pair lives as long as a ranker uses it, so the pairs
// of addresses an FQDN target no longer resolves to go with their sockets and ranking state.
func (e *Endpoint) acquire(target netip.AddrPort) *pair {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.pairs[target]
	if !ok {
		if e.pairs == nil {
			e.pairs = make(map[netip.AddrPort]*pair)
		}
		p = newPair(e, e.sourceFor(target), target)
		e.pairs[target] = p
	}
	p.refs++
	return p
}

// release lets go of a pair acquire returned, closing it when nobody else holds it.
func (e *Endpoint) release(p *pair) {
	e.mu.Lock()
	p.refs--
	last := p.refs == 0
	if last {
		delete(e.pairs, p.dst)
	}
	e.mu.Unlock()
	if last {
		p.close()
	}
}

// sourceFor is O-2's stable choice: the same target always gets the same source address of e,
// so a firewall in front of the resolver sees a predictable source per endpoint.
func (e *Endpoint) sourceFor(target netip.AddrPort) netip.Addr {
	if len(e.addrs) == 0 {
		return netip.Addr{}
	}
	h := fnv.New32a()
	b := target.Addr().As4()
	h.Write(b[:])
	h.Write([]byte(e.Name))
	// A handful of configured source addresses: the length is positive (checked above) and far
	// below 2^32.
	return e.addrs[h.Sum32()%uint32(len(e.addrs))] //nolint:gosec // bounded length, see above
}
