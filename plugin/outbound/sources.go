package outbound

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
)

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
	slices.SortFunc(addrs, netip.Addr.Compare)
	e.addrs = slices.Compact(addrs)
	return nil
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
