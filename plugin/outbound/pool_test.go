package outbound

import (
	"net"
	"net/netip"
	"testing"
	"time"
)

// A steady load with more queries in flight than the old 64 idle connections kept must not open
// and close a TCP connection per query: every connection given back is kept for the next query,
// and an idle one past idleExpire is closed when the pool is next used.
func TestPoolKeepsSocketsOfTheLoad(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	u := &upstream{src: netip.MustParseAddr("127.0.0.1"), dst: netip.MustParseAddrPort(l.Addr().String())}
	defer u.close()
	const inFlight = 100
	conns := make([]*conn, inFlight)
	for i := range conns {
		c, err := u.get(time.Now().Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	for _, c := range conns {
		u.put(c)
	}
	if n := len(u.idle); n != inFlight {
		t.Fatalf("%d idle sockets kept after %d in flight, want all of them", n, inFlight)
	}
	// The next round reuses them: no new socket.
	for i := range conns {
		c, err := u.get(time.Now().Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if c != conns[inFlight-1-i] {
			t.Fatalf("query %d got a new socket although idle ones were there", i)
		}
	}
	// Give them back as if the oldest 99 had sat idle for longer than idleExpire.
	for _, c := range conns {
		u.put(c)
	}
	for _, c := range u.idle[:inFlight-1] {
		c.used = c.used.Add(-2 * idleExpire)
	}
	c, err := u.get(time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	u.put(c)
	if n := len(u.idle); n != 1 {
		t.Fatalf("%d idle sockets after the others expired, want 1", n)
	}
}
