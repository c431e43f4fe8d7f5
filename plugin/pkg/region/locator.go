package region

import (
	"net"
	"net/netip"
	"sort"

	"github.com/miekg/dns"
)

// Locator maps a query to the region it comes from (L-1, L-2). It is built once at load time
// and read without locks or allocation on the query path.
type Locator struct {
	Table  *Table
	server ID

	// lengths are the prefix lengths present, longest first, per family (0: IPv4, 1: IPv6);
	// nets maps each masked prefix to its region.
	lengths [2][]int
	nets    map[netip.Prefix]ID
}

// Server returns the region this server runs in, or None when `region` was not given.
func (l *Locator) Server() ID { return l.server }

// Region returns the region of addr: the longest configured subnet that contains it, else the
// server's own region (L-2).
func (l *Locator) Region(addr netip.Addr) ID {
	id, _ := l.Subnet(addr)
	return id
}

// Subnet is Region that also returns the configured subnet that matched, or the zero Prefix when
// none did and the server's own region was used: explain says which `subnet` line placed a client.
func (l *Locator) Subnet(addr netip.Addr) (ID, netip.Prefix) {
	addr = addr.Unmap()
	fam := 0
	if addr.Is6() {
		fam = 1
	}
	for _, bits := range l.lengths[fam] {
		p, err := addr.Prefix(bits)
		if err != nil {
			continue
		}
		if id, ok := l.nets[p]; ok {
			return id, p
		}
	}
	return l.server, netip.Prefix{}
}

// Source is where a query comes from.
type Source struct {
	Addr netip.Addr
	// ECS is the client subnet option the address came from, or nil when it came from the
	// client's own address. Answers that used it set its scope (RFC 7871).
	ECS *dns.EDNS0_SUBNET
}

// SourceOf returns the source address of r from client: the EDNS Client Subnet address when
// public is set and the query carries one with a source prefix above 0, else the client address
// (L-1). A private zone ignores ECS.
func SourceOf(client net.Addr, r *dns.Msg, public bool) Source {
	if public {
		if opt := r.IsEdns0(); opt != nil {
			for _, o := range opt.Option {
				e, ok := o.(*dns.EDNS0_SUBNET)
				if !ok || e.SourceNetmask == 0 {
					continue
				}
				if a, ok := netip.AddrFromSlice(e.Address); ok {
					return Source{Addr: a.Unmap(), ECS: e}
				}
			}
		}
	}
	return Source{Addr: addrOf(client)}
}

// addrOf returns the IP address of a client net.Addr without allocating.
func addrOf(a net.Addr) netip.Addr {
	switch v := a.(type) {
	case *net.UDPAddr:
		ip, _ := netip.AddrFromSlice(v.IP)
		return ip.Unmap()
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(v.IP)
		return ip.Unmap()
	case *net.IPAddr:
		ip, _ := netip.AddrFromSlice(v.IP)
		return ip.Unmap()
	}
	if a == nil {
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// Locate returns the region of the query r from client (L-1 then L-2) and its Source.
func (l *Locator) Locate(client net.Addr, r *dns.Msg, public bool) (ID, Source) {
	src := SourceOf(client, r, public)
	return l.Region(src.Addr), src
}

// ScopeOption returns the client subnet option to put in an answer that used e: the same family,
// source prefix and address, with the scope prefix set to the source prefix (RFC 7871 7.2.1).
func ScopeOption(e *dns.EDNS0_SUBNET) *dns.EDNS0_SUBNET {
	return &dns.EDNS0_SUBNET{
		Code:          dns.EDNS0SUBNET,
		Family:        e.Family,
		SourceNetmask: e.SourceNetmask,
		SourceScope:   e.SourceNetmask,
		Address:       e.Address,
	}
}

func newLocator(t *Table, server ID, subnets map[netip.Prefix]ID) *Locator {
	l := &Locator{Table: t, server: server, nets: subnets}
	seen := [2]map[int]bool{{}, {}}
	for p := range subnets {
		fam := 0
		if p.Addr().Is6() {
			fam = 1
		}
		if !seen[fam][p.Bits()] {
			seen[fam][p.Bits()] = true
			l.lengths[fam] = append(l.lengths[fam], p.Bits())
		}
	}
	for f := range l.lengths {
		sort.Sort(sort.Reverse(sort.IntSlice(l.lengths[f])))
	}
	return l
}
