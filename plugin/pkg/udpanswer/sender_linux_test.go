package udpanswer

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"
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
// ::1, a dual-stack socket to an IPv4 client (v4-mapped) and to an IPv6 one, and the IPv4 socket
// again: each answer reaches its client, whole, from the socket it was sent on, and nothing of an
// answer stays pointed at once sent.
func TestSenderAcrossSocketsAndFamilies(t *testing.T) {
	v4, v6, dual := listen(t, "127.0.0.1:0"), listen(t, "[::1]:0"), listen(t, "[::]:0")
	c4, c6 := listen(t, "127.0.0.1:0"), listen(t, "[::1]:0")
	d := new(Direct)
	for i, c := range []struct {
		conn, client *net.UDPConn
	}{{v4, c4}, {v6, c6}, {dual, c4}, {dual, c6}, {v4, c4}, {v6, c6}} {
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
// client address with a zone, an empty answer; and a client that cannot be reached is the
// system's error, named with the call.
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

	if n, err := d.Write(nil); n != 0 || err != nil {
		t.Errorf("empty answer: %d, %v", n, err)
	}
	received(t, c6, nil, v6) // an empty datagram, as the net package sends it

	d = Direct{conn: v4, addr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 0}}
	_, _, want = v4.WriteMsgUDP([]byte("x"), nil, d.addr)
	_, err := d.Write([]byte("x"))
	var sys *os.SyscallError
	if err == nil || want == nil || err.Error() != want.Error() || !errors.As(err, &sys) || sys.Syscall != "sendmsg" {
		t.Errorf("send to port 0: %v, want %v", err, want)
	}
}
