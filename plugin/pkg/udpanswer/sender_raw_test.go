//go:build linux && !386 && !s390x

package udpanswer

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// listen is a UDP socket on addr ("127.0.0.1:0", "[::]:0" ...), closed when the test ends.
func listen(t *testing.T, addr string) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// received reads one datagram from c and checks that it is want, sent from the port of from.
func received(t *testing.T, c *net.UDPConn, want []byte, from *net.UDPConn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	n, src, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("%s: nothing received: %v", c.LocalAddr(), err)
	}
	if !bytes.Equal(buf[:n], want) {
		t.Errorf("%s: received %x, want %x", c.LocalAddr(), buf[:n], want)
	}
	if port := from.LocalAddr().(*net.UDPAddr).Port; int(src.Port()) != port {
		t.Errorf("%s: received from %s, want port %d", c.LocalAddr(), src, port)
	}
}

// TestSenderAcrossSocketsAndFamilies: issue 12 (R-ZONE-1: answers as CoreDNS sends them): one
// Direct, reused as routingpolicy's pooled one is, sends on an IPv4 socket, an IPv6 socket bound to
// ::1, a dual-stack socket to an IPv4 client (v4-mapped) and to an IPv6 one, an IPv4-only socket
// bound to every address ("udp4"), and the first two again: each answer reaches its client, whole, from the socket it was sent on, and nothing of an
// answer stays pointed at once sent.
func TestSenderAcrossSocketsAndFamilies(t *testing.T) {
	v4, v6, dual := listen(t, "127.0.0.1:0"), listen(t, "[::1]:0"), listen(t, "[::]:0")
	udp4, err := net.ListenUDP("udp4", &net.UDPAddr{})
	if err != nil {
		t.Fatal(err)
	}
	defer udp4.Close()
	c4, c6 := listen(t, "127.0.0.1:0"), listen(t, "[::1]:0")
	d := new(Direct)
	for i, c := range []struct {
		conn, client *net.UDPConn
	}{{v4, c4}, {v6, c6}, {dual, c4}, {dual, c6}, {udp4, c4}, {v4, c4}, {v6, c6}} {
		answer := bytes.Repeat([]byte{byte(i + 1)}, 20+i)
		d.conn, d.addr = c.conn, c.client.LocalAddr().(*net.UDPAddr)
		if n, err := d.Write(answer); err != nil || n != len(answer) {
			t.Fatalf("send %d on %s to %s: %d, %v", i, c.conn.LocalAddr(), d.addr, n, err)
		}
		received(t, c.client, answer, c.conn)
		if d.send.iov.Base != nil || d.send.msg.Control != nil {
			t.Errorf("send %d: the sender still points at the answer", i)
		}
		d.Clear()
	}
}

// TestSenderCopiedDirect: a Direct copied by value (its sender holds a function bound to itself)
// sends its own answer to its own client, and the original still sends its own.
func TestSenderCopiedDirect(t *testing.T) {
	srv, a, b := listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
	d := Direct{conn: srv, addr: a.LocalAddr().(*net.UDPAddr)}
	if _, err := d.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	received(t, a, []byte("first"), srv)
	copied := d
	copied.addr = b.LocalAddr().(*net.UDPAddr)
	if _, err := copied.Write([]byte("copy")); err != nil {
		t.Fatal(err)
	}
	received(t, b, []byte("copy"), srv)
	if _, err := d.Write([]byte("original")); err != nil {
		t.Fatal(err)
	}
	received(t, a, []byte("original"), srv)
}

// TestSenderAllocatesNothing: issue 12 (the query path allocates little): once a Direct has sent
// on a socket, its next sends there allocate nothing (the net package's WriteMsgUDP allocates the
// client's socket address each time), with and without a control message.
func TestSenderAllocatesNothing(t *testing.T) {
	srv, client := listen(t, "[::]:0"), listen(t, "127.0.0.1:0")
	drain(client)
	d := Direct{conn: srv, addr: client.LocalAddr().(*net.UDPAddr)}
	answer := make([]byte, 60)
	for _, oob := range [][]byte{nil, Reply(pktinfo4(net.IPv4(127, 0, 0, 1), 1))} {
		d.oob = oob
		if _, err := d.Write(answer); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() { d.Write(answer) }); n != 0 {
			t.Errorf("control message %x: %v allocations per send, want 0", oob, n)
		}
	}
	// One pooled Direct answers for several listeners (multisocket, bind with several
	// addresses, server blocks): switching between them allocates nothing either.
	other := listen(t, "127.0.0.1:0")
	d.oob = nil
	d.conn = other
	d.Write(answer)
	if n := testing.AllocsPerRun(100, func() {
		d.conn = srv
		d.Write(answer)
		d.conn = other
		d.Write(answer)
	}); n != 0 {
		t.Errorf("alternating sockets: %v allocations per two sends, want 0", n)
	}
}

// TestSenderSourceFromControlMessage: R-ZONE-1 (answers as CoreDNS sends them): on a listener
// bound to every address, the control message Reply makes sets the answer's source: 127.0.0.2,
// though the kernel would pick 127.0.0.1 for a client on 127.0.0.1.
func TestSenderSourceFromControlMessage(t *testing.T) {
	srv, client := listen(t, "[::]:0"), listen(t, "127.0.0.1:0")
	d := Direct{conn: srv, addr: client.LocalAddr().(*net.UDPAddr), oob: Reply(pktinfo4(net.IPv4(127, 0, 0, 2), 1))}
	if _, err := d.Write([]byte("from .2")); err != nil {
		t.Fatal(err)
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, src, err := client.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatal(err)
	}
	if string(buf[:n]) != "from .2" || src.Addr().Unmap() != netip.MustParseAddr("127.0.0.2") {
		t.Errorf("received %q from %s, want from 127.0.0.2", buf[:n], src)
	}
}

// TestSenderWriteDeadline: a socket's write deadline holds for the sender's call as for the net
// package's: past, the send is refused with the deadline's error.
func TestSenderWriteDeadline(t *testing.T) {
	srv, client := listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
	d := Direct{conn: srv, addr: client.LocalAddr().(*net.UDPAddr)}
	srv.SetWriteDeadline(time.Now().Add(-time.Second))
	_, _, want := srv.WriteMsgUDP([]byte("x"), nil, d.addr)
	n, err := d.Write([]byte("x"))
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) || want == nil || err.Error() != want.Error() {
		t.Errorf("past deadline: %d, %v; want %v", n, err, want)
	}
	srv.SetWriteDeadline(time.Time{})
	if _, err := d.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	received(t, client, []byte("y"), srv)
}

// drain reads c until it is closed, so its buffer never fills.
func drain(c *net.UDPConn) {
	go func() {
		buf := make([]byte, 512)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	}()
}

// TestSenderClosedSocket: a send on a socket closed since (a server stopping past its grace
// time) is the net package's error for a closed connection, never a write to a descriptor the
// process has reused; before and after the socket was first sent on.
func TestSenderClosedSocket(t *testing.T) {
	for _, sentBefore := range []bool{false, true} {
		srv, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		client := listen(t, "127.0.0.1:0")
		d := Direct{conn: srv, addr: client.LocalAddr().(*net.UDPAddr)}
		if sentBefore {
			if _, err := d.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			received(t, client, []byte("x"), srv)
		}
		srv.Close()
		listen(t, "127.0.0.1:0") // likely takes the closed socket's descriptor number
		n, err := d.Write([]byte("after close"))
		if n != 0 || !errors.Is(err, net.ErrClosed) {
			t.Errorf("sent before %v: Write on a closed socket: %d, %v; want net.ErrClosed", sentBefore, n, err)
		}
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "write" || op.Addr.String() != client.LocalAddr().String() {
			t.Errorf("sent before %v: error %v does not name the write and the client", sentBefore, err)
		}
		client.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, _, err := client.ReadFromUDP(make([]byte, 64)); err == nil {
			t.Errorf("sent before %v: the client received an answer sent on a closed socket", sentBefore)
		}
	}
}

// TestSenderErrorsAsNetDoes: what the sender does not make itself goes through the net package,
// with its result: an IPv6 client on an IPv4 socket (an error, as miekg/dns's Write returns), a
// client address with a zone, an empty answer; and a system call that fails (a client that cannot
// be reached, port 0) is the net package's error, word for word (the socket's network included).
func TestSenderErrorsAsNetDoes(t *testing.T) {
	v4, c6 := listen(t, "127.0.0.1:0"), listen(t, "[::1]:0")
	d := Direct{conn: v4, addr: c6.LocalAddr().(*net.UDPAddr)}
	_, _, want := v4.WriteMsgUDP([]byte("x"), nil, d.addr)
	if _, err := d.Write([]byte("x")); err == nil || want == nil || err.Error() != want.Error() {
		t.Errorf("IPv6 client on an IPv4 socket: %v, want %v", err, want)
	}

	v6 := listen(t, "[::1]:0")
	zoned := *c6.LocalAddr().(*net.UDPAddr)
	zoned.Zone = "lo"
	d = Direct{conn: v6, addr: &zoned}
	if _, err := d.Write([]byte("zone")); err != nil {
		t.Fatal(err)
	}
	received(t, c6, []byte("zone"), v6)
	if d.send.sock != nil {
		// Linux ignores the zone of ::1, so what is received cannot tell; the sender never
		// looked at the socket, which it does first on its own path.
		t.Error("a client address with a zone was sent by the sender, not the net package (it drops the zone)")
	}

	if n, err := d.Write(nil); n != 0 || err != nil {
		t.Errorf("empty answer: %d, %v", n, err)
	}
	received(t, c6, nil, v6) // an empty datagram, as the net package sends it

	// As the net package: an unspecified address (on a dual-stack socket :: , not ::ffff:0.0.0.0),
	// a port out of range, port 0, a connected socket, no client address; and a Direct with no
	// socket (cleared) says so, where the net package panics.
	dual := listen(t, "[::]:0")
	connected, err := net.DialUDP("udp", nil, c6.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer connected.Close()
	udp4, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp4.Close()
	c4 := listen(t, "127.0.0.1:0")
	c4Port := c4.LocalAddr().(*net.UDPAddr).Port
	for _, c := range []struct {
		name string
		conn *net.UDPConn
		addr *net.UDPAddr
	}{
		{"0.0.0.0 on a dual-stack socket", dual, &net.UDPAddr{IP: net.IPv4zero, Port: 9}},
		{"port 65536", v4, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 65536}},
		// Cut to 16 bits, these would reach c4 (65536 + its port) and port 65535.
		{"port 65536 + a client's port", v4, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 65536 + c4Port}},
		{"port -1", v4, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: -1}},
		{"port 0", v4, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}},
		{"port 0 on a udp4 socket", udp4, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}},
		{"an IPv4 client of a socket bound to ::1 (unreachable)", v6, c4.LocalAddr().(*net.UDPAddr)},
		{"connected socket", connected, c6.LocalAddr().(*net.UDPAddr)},
		{"no socket", nil, c6.LocalAddr().(*net.UDPAddr)},
		{"no client address", v4, nil},
	} {
		want := noQuery()
		if c.conn != nil {
			_, _, want = c.conn.WriteMsgUDP([]byte("x"), nil, c.addr)
		}
		d = Direct{conn: c.conn, addr: c.addr}
		_, err := d.Write([]byte("x"))
		if (err == nil) != (want == nil) || err != nil && err.Error() != want.Error() {
			t.Errorf("%s: %v, want %v", c.name, err, want)
		}
	}
	c4.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, _, err := c4.ReadFromUDP(make([]byte, 64)); err == nil {
		t.Error("an answer to a port out of range reached the client at that port cut to 16 bits")
	}
}

// liveRawConn is a RawConn of a socket that is open, for the cache's tests.
type liveRawConn struct{ syscall.RawConn }

func (liveRawConn) Control(func(uintptr)) error { return nil }

// TestSocketCachePrunesClosed: the cache of sockets, when full, drops the sockets closed since
// they were kept (a reload's old listeners) and keeps those still open; if half of it or more is
// open, it grows to twice its size, so a server with many listeners (multisocket: up to 1024
// each) never looks a socket in use up again; one full of closed sockets keeps its size.
func TestSocketCachePrunesClosed(t *testing.T) {
	sockets.Lock()
	savedM, savedLimit := sockets.m, sockets.limit
	sockets.m, sockets.limit = make(map[*net.UDPConn]*socket), 8
	sockets.Unlock()
	t.Cleanup(func() {
		sockets.Lock()
		sockets.m, sockets.limit = savedM, savedLimit
		sockets.Unlock()
	})
	closedSocket := func() *net.UDPConn {
		c := listen(t, "127.0.0.1:0")
		socketOf(c)
		c.Close()
		return c
	}
	open := listen(t, "127.0.0.1:0")
	openSk, closed := socketOf(open), closedSocket()
	for range 5 {
		sockets.m[new(net.UDPConn)] = &socket{rc: liveRawConn{}, family: unix.AF_INET, net: "udp", ok: true}
	}
	sockets.m[new(net.UDPConn)] = &socket{family: -1, net: "udp"} // connected: dropped, made again if seen
	next := listen(t, "127.0.0.1:0")
	socketOf(next)
	if len(sockets.m) != 7 || sockets.limit != 16 || sockets.m[open] != openSk || sockets.m[closed] != nil || sockets.m[next] == nil {
		t.Errorf("a full cache of 6 open sockets, 1 closed, 1 connected, then a new one: %d kept (want 7), size %d (want 16), open kept %v, closed dropped %v, new kept %v",
			len(sockets.m), sockets.limit, sockets.m[open] == openSk, sockets.m[closed] == nil, sockets.m[next] != nil)
	}

	// Full of closed sockets: they go, and the size stays.
	sockets.m, sockets.limit = map[*net.UDPConn]*socket{open: openSk}, 8
	for len(sockets.m) < 8 {
		closedSocket()
	}
	socketOf(next)
	if len(sockets.m) != 2 || sockets.limit != 8 || sockets.m[open] != openSk {
		t.Errorf("a full cache of 7 closed sockets and an open one, then a new one: %d kept (want 2), size %d (want 8), open kept %v",
			len(sockets.m), sockets.limit, sockets.m[open] == openSk)
	}
}
