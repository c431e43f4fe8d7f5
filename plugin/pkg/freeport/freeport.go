// Package freeport finds ports that tests and measurements can bind: free for both UDP and TCP,
// so a DNS server (both transports on one port) or any TCP server can take them. Other helpers
// run tests on the same machine at the same time, so fixed ports are never used.
package freeport

import (
	"fmt"
	"net"
)

// On returns a port free for both UDP and TCP on host (an IP address).
func On(host string) (string, error) {
	for range 20 {
		pc, err := net.ListenPacket("udp", net.JoinHostPort(host, "0"))
		if err != nil {
			return "", err
		}
		_, port, _ := net.SplitHostPort(pc.LocalAddr().String())
		l, err := net.Listen("tcp", net.JoinHostPort(host, port))
		pc.Close()
		if err == nil {
			l.Close()
			return port, nil
		}
	}
	return "", fmt.Errorf("no port free for UDP and TCP on %s", host)
}
