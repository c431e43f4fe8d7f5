package udpbatch

import (
	"context"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
)

// countYields makes s count its yields.
func countYields(s *socket) *atomic.Int64 {
	var n atomic.Int64
	s.mu.Lock()
	s.yield = func() {
		n.Add(1)
		runtime.Gosched()
	}
	s.mu.Unlock()
	return &n
}

// A query that comes alone is answered without a yield: its sender does not wait behind
// whatever else wants the processor (a GC worker, a reload), so a lone query costs what it costs
// without udpbatch.
func TestYieldNotWhenAlone(t *testing.T) {
	srv := coretest.Start(t, zoneCorefile("0", zone(t)))
	to := addrPort(t, srv.UDP)
	s := sockets(t, srv.Instance(), 1)[0]
	yields := countYields(s)
	c := newClient(t, "127.0.0.1")
	for i := range 30 {
		c.exchange(to, query(t, uint16(i), "www.example.org.", dns.TypeA, false))
	}
	if n := yields.Load(); n != 0 {
		t.Errorf("%d yields for 30 queries asked one at a time", n)
	}
}

// A query during whose handling another one came in yields (the other could join its batch);
// the next senders do not after a yield that no answer joined, until a batch of several.
func TestYieldWhenOthersCame(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	running, gate := make(chan struct{}), make(chan struct{})
	_, s := miekgServer(t, pc, "yield-others", 64, func(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
		if r.Id == 1 {
			close(running)
			<-gate
		}
		return answerA(ctx, w, r)
	})
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open) // before the server's shutdown, which waits for the handler
	yields := countYields(s)
	to := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	c1, c2 := newClient(t, "127.0.0.1"), newClient(t, "127.0.0.1")
	c1.send(to, query(t, 1, "a.example.", dns.TypeA, false))
	<-running
	// Query 2 comes while 1 is handled, and is answered first, alone: no yield.
	c2.exchange(to, query(t, 2, "a.example.", dns.TypeA, false))
	if n := yields.Load(); n != 0 {
		t.Fatalf("%d yields for the query that came last", n)
	}
	waitIdle(t, s) // its sender is done: 1 will be the sender of its own answer
	open()
	c1.receive()
	waitIdle(t, s)
	if n := yields.Load(); n != 1 {
		t.Fatalf("%d yields for the query another came during, want 1", n)
	}
	s.mu.Lock()
	skip := s.skip
	s.mu.Unlock()
	if skip != 1 {
		t.Errorf("after a yield no answer joined, %d senders skip the yield, want 1", skip)
	}
	// A batch of several answers shows they queue by themselves: the backoff ends.
	release := hold(t, s)
	c1.send(to, query(t, 3, "a.example.", dns.TypeA, false))
	c2.send(to, query(t, 4, "a.example.", dns.TypeA, false))
	waitQueued(t, s, 2)
	release()
	c1.receive()
	c2.receive()
	s.mu.Lock()
	skip = s.skip
	s.mu.Unlock()
	if skip != 0 {
		t.Errorf("after a batch of two, %d senders skip the yield, want 0", skip)
	}
}

// The backoff after useless yields: 1, 3, 7 ... senders that would yield do not, up to
// maxBackoff; a yield that others joined ends it.
func TestYieldBackoff(t *testing.T) {
	s := newSocket("backoff", 8)
	s.arrivals.Store(10)
	if s.wantYield(10) {
		t.Fatal("the last query to arrive yields")
	}
	skips := func() int {
		n := 0
		for !s.wantYield(9) {
			n++
			if n > maxBackoff {
				t.Fatal("no yield after maxBackoff senders")
			}
		}
		return n
	}
	if n := skips(); n != 0 {
		t.Fatalf("%d senders skipped the yield before any useless one", n)
	}
	for _, want := range []int{1, 3, 7, 15, 31, 63, 127, 255, 255} {
		s.yielded(0)
		if n := skips(); n != want {
			t.Errorf("%d skips after a useless yield, want %d", n, want)
		}
	}
	s.yielded(0)
	s.yielded(3)
	if n := skips(); n != 0 {
		t.Errorf("%d skips after a yield others joined, want 0", n)
	}
}

// A query alone among the handlers yields when other queries wait unread in the socket's
// receive queue: the reader may start their handlers meanwhile.
func TestYieldWhenQueriesUnread(t *testing.T) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s := newSocket("unread", 8)
	s.conn = conn
	s.rc, _ = conn.SyscallConn()
	s.arrivals.Store(1)
	if s.wantYield(1) {
		t.Fatal("yield with nothing unread")
	}
	c := newClient(t, "127.0.0.1")
	c.send(conn.LocalAddr().(*net.UDPAddr).AddrPort(), query(t, 1, "a.example.", dns.TypeA, false))
	waitFor(t, s, "the query in the receive queue", func() bool { return s.unreadQueries() })
	if !s.wantYield(1) {
		t.Error("no yield with a query unread")
	}
}
