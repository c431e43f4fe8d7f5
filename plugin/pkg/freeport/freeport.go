// Package freeport finds ports that tests and measurements can bind: free for both UDP and TCP,
// so a DNS server (both transports on one port) or any TCP server can take them. Other helpers
// run tests on the same machine at the same time, so fixed ports are never used.
//
// The ports lie below the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999
// by default), from which every connect and every bind to port 0 on the machine draws: between
// On's check and the caller's bind (an etcd or CoreDNS process starting, a server block read),
// no outgoing socket of any process can take the port. On never returns a port twice in one
// process (two servers picking one port and binding it with SO_REUSEPORT, as CoreDNS does, would
// share it silently); two processes calling On can still pick the same port, each at random among
// about 12,000, if both pick it before either binds it.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// span is how many ports below the ephemeral range On picks from.
const span = 12000

// issued are the ports On returned in this process.
var issued = struct {
	sync.Mutex
	ports map[string]bool
}{ports: make(map[string]bool)}

// take reports whether port is free on host and was not returned before, and marks it returned.
func take(host, port string) bool {
	issued.Lock()
	defer issued.Unlock()
	if issued.ports[port] || !free(host, port) {
		return false
	}
	issued.ports[port] = true
	return true
}

// On returns a port free for both UDP and TCP on host (an IP address).
func On(host string) (string, error) {
	if hi := ephemeralLow(); hi-span >= 1024 {
		for range 100 {
			port := strconv.Itoa(hi - span + rand.IntN(span)) //nolint:gosec // a port to try, not a secret
			if take(host, port) {
				return port, nil
			}
		}
	}
	// The ephemeral range starts too low to leave room below it, or nothing was free there:
	// a port the kernel chooses, free now.
	for range 20 {
		pc, err := net.ListenPacket("udp", net.JoinHostPort(host, "0"))
		if err != nil {
			return "", err
		}
		_, port, _ := net.SplitHostPort(pc.LocalAddr().String())
		pc.Close()
		if take(host, port) {
			return port, nil
		}
	}
	return "", fmt.Errorf("no port free for UDP and TCP on %s", host)
}

// free reports whether port can be bound on host for both UDP and TCP.
func free(host, port string) bool {
	pc, err := net.ListenPacket("udp", net.JoinHostPort(host, port))
	if err != nil {
		return false
	}
	defer pc.Close()
	l, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's default where the
// setting cannot be read: other systems).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
}
