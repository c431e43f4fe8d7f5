package outbound

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
	"go.uber.org/goleak"
)

// dialRaw is a socket connected to pc, as a pair's socket is to its resolver.
func dialRaw(t *testing.T, pc *net.UDPConn) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP("udp", nil, pc.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A burst of replies larger than one recvmmsg takes (readBatch) waits in the socket when its
// reader starts: every reply reaches its own query, over several batches, and the reader ends
// when the socket closes.
func TestRecvmmsgBurstLargerThanABatch(t *testing.T) {
	snapshot := goleak.IgnoreCurrent()
	pc := listenRaw(t)
	c := dialRaw(t, pc)
	u := &upstream{}
	s := &udpSock{u: u, c: c, waiters: map[uint16]*waiter{}}
	const n = 3*readBatch - 5
	qs := make([]*dns.Msg, n)
	for i := range qs {
		qs[i] = waitFor(s, fmt.Sprintf("q%d.example.", i), uint16(1000+i))
	}
	for i, q := range qs {
		if _, err := pc.WriteTo(answerTo(q, q.Id, net.IPv4(192, 0, 2, byte(i))), c.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() { s.read(); close(done) }()
	timeout := time.After(10 * time.Second)
	for i, q := range qs {
		w := s.waiters[q.Id] // the reader only reads the map: it never changes here
		select {
		case d := <-w.ch:
			m := new(dns.Msg)
			if d.err != nil || m.Unpack((*d.b)[:d.n]) != nil || m.Question[0].Name != q.Question[0].Name ||
				len(m.Answer) != 1 || !m.Answer[0].(*dns.A).A.Equal(net.IPv4(192, 0, 2, byte(i))) {
				t.Fatalf("query %d was handed %v (err %v)", i, m, d.err)
			}
			dgramPool.Put(d.b)
		case <-timeout:
			t.Fatalf("reply %d of a burst of %d never reached its query", i, n)
		}
	}
	c.Close()
	select {
	case <-done:
	case <-timeout:
		t.Fatal("the reader did not end when its socket closed")
	}
	coretest.NoLeak(t, snapshot)
}

// The reader's recvmmsg allocates nothing per read or per datagram: no source address (the
// socket is connected), no headers, no callback.
func TestRecvmmsgReadAllocatesNothing(t *testing.T) {
	pc := listenRaw(t)
	c := dialRaw(t, pc)
	c.SetReadBuffer(readBuffer)
	const runs = 50
	msg := make([]byte, 64)
	msg[2] = 0x80
	for range 2 * (runs + 1) {
		if _, err := pc.WriteTo(msg, c.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	r := newBatchReader(c)
	var (
		bufs [readBatch]*[]byte
		got  [readBatch]received
	)
	for i := range bufs {
		bufs[i] = dgramPool.Get().(*[]byte)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var err error
	allocs := testing.AllocsPerRun(runs, func() {
		var n int
		// Two datagrams a read: the batch is read and its second entry filled.
		n, err = r.read(bufs[:2], got[:])
		if err == nil && (n != 2 || got[1].n != len(msg)) {
			err = fmt.Errorf("read %d datagrams, the second of %d bytes", n, got[1].n)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if allocs != 0 {
		t.Errorf("a batch read allocates %v times", allocs)
	}
}
