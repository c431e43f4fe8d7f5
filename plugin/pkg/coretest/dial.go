package coretest

import (
	"net"
)

// dialerFrom returns a dialer whose UDP and TCP sockets leave from the address from.
func dialerFrom(from string) *net.Dialer {
	ip := net.ParseIP(from)
	return &net.Dialer{LocalAddr: &net.UDPAddr{IP: ip}}
}
