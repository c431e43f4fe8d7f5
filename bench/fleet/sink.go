package main

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// sink is the health-check targets: TCP listeners on consecutive loopback addresses, one port,
// counting the connections (the probes) they accept.
type sink struct {
	port     uint16
	addrs    []netip.Addr
	accepted atomic.Int64
	mu       sync.Mutex
	lns      []net.Listener
	wg       sync.WaitGroup
}

// newSink listens on count addresses from 127.56.0.1 on one free port.
func newSink(count int) (*sink, error) {
	for range 20 {
		s := &sink{}
		first, err := net.Listen("tcp", "127.56.0.1:0")
		if err != nil {
			return nil, err
		}
		s.port = first.Addr().(*net.TCPAddr).AddrPort().Port()
		s.lns = append(s.lns, first)
		s.addrs = append(s.addrs, netip.MustParseAddr("127.56.0.1"))
		ok := true
		for i := 1; i < count; i++ {
			a := netip.AddrFrom4([4]byte{127, 56, byte((i + 1) >> 8), byte(i + 1)})
			l, err := net.Listen("tcp", netip.AddrPortFrom(a, s.port).String())
			if err != nil {
				ok = false
				break
			}
			s.lns = append(s.lns, l)
			s.addrs = append(s.addrs, a)
		}
		if !ok {
			s.close()
			continue
		}
		for _, l := range s.lns {
			s.wg.Go(func() { s.serve(l) })
		}
		return s, nil
	}
	return nil, fmt.Errorf("no port free on %d addresses", count)
}

func (s *sink) serve(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		s.accepted.Add(1)
		c.Close()
	}
}

// fail closes target i: its probes are refused from now on.
func (s *sink) fail(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lns[i].Close()
}

// recover listens on target i again.
func (s *sink) recover(i int) error {
	l, err := net.Listen("tcp", netip.AddrPortFrom(s.addrs[i], s.port).String())
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.lns[i] = l
	s.mu.Unlock()
	s.wg.Go(func() { s.serve(l) })
	return nil
}

func (s *sink) close() {
	s.mu.Lock()
	for _, l := range s.lns {
		l.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}
