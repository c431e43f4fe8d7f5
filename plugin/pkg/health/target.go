package health

import (
	"errors"
	"net/netip"
)

// ParseTarget reads a probed target as a Corefile gives it: ADDRESS or ADDRESS:PORT (an IPv6
// address with a port in brackets). Port 0 in the result means "the check's port". healthcheck's
// load-balancer backends and pschealth's source backends both use it, so they accept the same.
func ParseTarget(s string) (netip.AddrPort, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		if err := ValidTarget(a); err != nil {
			return netip.AddrPort{}, err
		}
		return netip.AddrPortFrom(a.Unmap(), 0), nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}, errors.New("not an IP address or IP:PORT")
	}
	if ap.Port() == 0 {
		return netip.AddrPort{}, errors.New("port 0 is not allowed (1..65535; omit the port to use the check's)")
	}
	if err := ValidTarget(ap.Addr()); err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

// ValidTarget refuses addresses that cannot be one target on the board: IPv6 zones, the
// unspecified address, multicast.
func ValidTarget(a netip.Addr) error {
	switch {
	case a.Zone() != "":
		return errors.New("IPv6 zones are not allowed")
	case a.IsUnspecified():
		return errors.New("the unspecified address is not allowed")
	case a.IsMulticast():
		return errors.New("a multicast address is not allowed")
	}
	return nil
}
