package outbound

import (
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"sort"
	"sync"

	"github.com/coredns/caddy"
)

// Limits of O-4, as the reference has them.
const (
	maxPerRegion = 10
	maxPerZone   = 100
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
	addrs []netip.Addr // host addresses resolved from Sources at startup
	pairs map[netip.AddrPort]*pair
	err   error // why the sources cannot be used, set at startup
	init  bool
}

// pair returns the ranking and transport state of e towards target, creating it on first use.
func (e *Endpoint) pair(target netip.AddrPort) *pair {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.pairs[target]; ok {
		return p
	}
	if e.pairs == nil {
		e.pairs = make(map[netip.AddrPort]*pair)
	}
	src := e.sourceFor(target)
	p := newPair(e, src, target)
	e.pairs[target] = p
	return p
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
	// below 2^32. This runs for every forwarded query, hence no further check.
	return e.addrs[h.Sum32()%uint32(len(e.addrs))] //nolint:gosec // bounded length, see above
}

// resolve turns the declared sources into addresses of this host, once. An address must be one
// the host can bind; a range contributes the host's interface addresses inside it. The result
// is an error that says which source is missing (O-2: say so at startup).
func (e *Endpoint) resolve(hostAddrs func() []netip.Prefix) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.init {
		return e.err
	}
	e.init = true
	var addrs []netip.Addr
	for _, s := range e.Sources {
		if s.IsSingleIP() {
			if err := canBind(s.Addr()); err != nil {
				e.err = fmt.Errorf("endpoint %s: source %s is not an address of this host: %w", e.Name, s.Addr(), err)
				return e.err
			}
			addrs = append(addrs, s.Addr())
			continue
		}
		n := 0
		for _, h := range hostAddrs() {
			if s.Contains(h.Addr()) {
				addrs = append(addrs, h.Addr())
				n++
			}
		}
		if n == 0 {
			e.err = fmt.Errorf("endpoint %s: this host has no address in source range %s", e.Name, s)
			return e.err
		}
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i].Less(addrs[j]) })
	addrs = compactAddrs(addrs)
	e.addrs = addrs
	return nil
}

func compactAddrs(a []netip.Addr) []netip.Addr {
	out := a[:0]
	for i, x := range a {
		if i == 0 || x != a[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// canBind checks that a UDP socket can leave from a.
func canBind(a netip.Addr) error {
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 0)))
	if err != nil {
		return err
	}
	return c.Close()
}

// interfaceAddrs returns the IPv4 addresses of this host with their prefixes.
func interfaceAddrs() []netip.Prefix {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, a := range as {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if !ip.Is4() {
			continue
		}
		bits, _ := n.Mask.Size()
		out = append(out, netip.PrefixFrom(ip, bits))
	}
	return out
}

// close closes every socket of e.
func (e *Endpoint) close() {
	e.mu.Lock()
	ps := make([]*pair, 0, len(e.pairs))
	for _, p := range e.pairs {
		ps = append(ps, p)
	}
	e.pairs = nil
	e.mu.Unlock()
	for _, p := range ps {
		p.up.close()
		releaseOutcomes(p.key, p.outcomes)
	}
}

// registry holds the endpoints declared in one Corefile instance (O-9), so a name means the same
// endpoint, with the same ranking state, in every server block and view.
type registry struct {
	mu       sync.Mutex
	byName   map[string]*Endpoint
	byRegion map[string]int
}

type registryKey struct{}

// registryOf returns the endpoint registry of the instance c is setting up. The first call
// registers the shutdown hook that closes every endpoint's sockets.
func registryOf(c *caddy.Controller) *registry {
	if r, ok := c.Get(registryKey{}).(*registry); ok {
		return r
	}
	r := &registry{byName: make(map[string]*Endpoint), byRegion: make(map[string]int)}
	c.Set(registryKey{}, r)
	c.OnShutdown(func() error {
		r.close()
		return nil
	})
	return r
}

// declare adds e; a name declared twice and an 11th endpoint in one region are errors (O-4).
func (r *registry) declare(e *Endpoint) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byName[e.Name]; ok {
		return fmt.Errorf("endpoint %q declared twice; declare it once and name it alone elsewhere (endpoint %s)", e.Name, e.Name)
	}
	if r.byRegion[e.Region] >= maxPerRegion {
		return fmt.Errorf("endpoint %q: region %s already has %d endpoints, the most allowed per region", e.Name, e.Region, maxPerRegion)
	}
	r.byName[e.Name] = e
	r.byRegion[e.Region]++
	return nil
}

func (r *registry) lookup(name string) *Endpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byName[name]
}

func (r *registry) close() {
	r.mu.Lock()
	es := make([]*Endpoint, 0, len(r.byName))
	for _, e := range r.byName {
		es = append(es, e)
	}
	r.mu.Unlock()
	for _, e := range es {
		e.close()
	}
}
