package udpbatch

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"
)

// These tests run in a network namespace of their own (they need root, and iproute2's ip and tc):
// an address of their own on lo, a slow qdisc on lo, without touching the machine's network.

// inNetns moves the calling goroutine's thread (locked for good: it ends with the test) into a
// new network namespace and runs cmds there. Sockets opened afterwards from this goroutine
// (and the servers coretest starts from it) live in that namespace. Not for subtests: they run
// on goroutines of their own.
func inNetns(t *testing.T, cmds ...[]string) {
	t.Helper()
	runtime.LockOSThread() // never unlocked: the thread is discarded when the test goroutine ends
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		t.Fatalf("unshare(CLONE_NEWNET) (needs root): %v", err)
	}
	for _, c := range append([][]string{{"ip", "link", "set", "lo", "up"}}, cmds...) {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", c, err, out)
		}
	}
}

// reachable polls until a datagram from "from" to addr arrives: an address just put on lo in a
// new namespace may drop the first packets.
func reachable(t *testing.T, from, addr string) {
	t.Helper()
	l, err := net.ListenPacket("udp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c := newClient(t, from)
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 16)
	for time.Now().Before(deadline) {
		c.send(l.LocalAddr().(*net.UDPAddr).AddrPort(), []byte("x"))
		l.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, _, err := l.ReadFrom(buf); err == nil {
			return
		}
	}
	t.Fatalf("%s not reachable from %s", addr, from)
}

// A wildcard (dual-stack) listener asked on a second IPv6 address answers from that address,
// alone and in a batch: the IPV6_PKTINFO of each answer is sent. Asked on ::1 from ::1 the kernel
// would pick ::1 as the source without it; here the route to the client picks ::1, not the
// address asked.
func TestBatchSourceAddressIPv6SecondAddress(t *testing.T) {
	inNetns(t, []string{"ip", "-6", "addr", "add", "2001:db8::53/128", "dev", "lo", "nodad"})
	reachable(t, "::1", "2001:db8::53")
	pc, err := net.ListenPacket("udp", "[::]:0")
	if err != nil {
		t.Fatal(err)
	}
	_, s := miekgServer(t, pc, "ipv6-second", 64, answerA)
	port := uint16(pc.LocalAddr().(*net.UDPAddr).Port)
	asked := netip.AddrPortFrom(netip.MustParseAddr("2001:db8::53"), port)
	c := newClient(t, "::1")
	if _, from := c.exchange(asked, query(t, 1, "a.example.", dns.TypeA, false)); from != asked {
		t.Errorf("alone: asked %s, answered from %s", asked, from)
	}
	release := hold(t, s)
	c.send(asked, query(t, 2, "a.example.", dns.TypeA, false))
	c.send(asked, query(t, 3, "a.example.", dns.TypeA, false))
	waitQueued(t, s, 2)
	release()
	for range 2 {
		if _, from := c.receive(); from != asked {
			t.Errorf("batched: asked %s, answered from %s", asked, from)
		}
	}
}

// The socket's send buffer fills (a slow qdisc on lo holds the answers, charged to the socket):
// sendmmsg meets EAGAIN. The sender waits until the socket is writable, as miekg/dns's sendmsg
// does, so no answer is lost and none is counted as an error.
func TestSendBufferFullNoAnswerLost(t *testing.T) {
	inNetns(t, []string{"tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "2mbit", "burst", "8kb", "limit", "8mb"})
	reachable(t, "127.0.0.1", "127.0.0.1")

	// The setup does produce EAGAIN: a socket with the smallest send buffer, non-blocking.
	probe, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.SetsockoptInt(probe, unix.SOL_SOCKET, unix.SO_SNDBUF, 1)
	sink := &unix.SockaddrInet4{Port: 9, Addr: [4]byte{127, 0, 0, 1}}
	sawEAGAIN := false
	for range 200 {
		if err := unix.Sendto(probe, make([]byte, 100), 0, sink); errors.Is(err, unix.EAGAIN) {
			sawEAGAIN = true
			break
		}
	}
	unix.Close(probe)
	if !sawEAGAIN {
		t.Fatal("setup: no EAGAIN, the test would prove nothing")
	}

	var handled atomic.Int32
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.(*net.UDPConn).SetWriteBuffer(1); err != nil { // the kernel's minimum
		t.Fatal(err)
	}
	_, s := miekgServer(t, pc, "eagain", 64, func(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
		handled.Add(1)
		return answerA(ctx, w, r)
	})
	var m0 dto.Metric
	writeErrorsTotal.WithLabelValues(s.server).Write(&m0)
	to := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	c := newClient(t, "127.0.0.1")
	// At most window queries outstanding: the server's receive buffer (~212 KB, a few hundred
	// datagrams) never overflows, so every query reaches a handler, while far more answers than
	// the send buffer holds wait at once.
	const n, window = 300, 64
	seen := map[uint16]bool{}
	for sent := 0; len(seen) < n; {
		for ; sent < n && sent-len(seen) < window; sent++ {
			c.send(to, query(t, uint16(sent), "a.example.", dns.TypeA, false))
		}
		b, _, err := c.read()
		if err != nil {
			t.Fatalf("%d of %d answered (%d handled): %v", len(seen), n, handled.Load(), err)
		}
		var m dns.Msg
		if err := m.Unpack(b); err != nil {
			t.Fatal(err)
		}
		if seen[m.Id] {
			t.Fatalf("answer %d twice", m.Id)
		}
		seen[m.Id] = true
	}
	waitIdle(t, s)
	var m1 dto.Metric
	writeErrorsTotal.WithLabelValues(s.server).Write(&m1)
	if errs := m1.GetCounter().GetValue() - m0.GetCounter().GetValue(); errs != 0 {
		t.Errorf("%v send errors counted", errs)
	}
}

// A reload while the link is saturated (the socket's send buffer full, a slow egress): the old
// server waits for its handlers, whose answers wait in a batch or in sendmmsg, for CoreDNS's
// grace time (5 s), then closes the socket; the sender's sendmmsg then fails at once and every
// waiting handler returns. The reload is bounded as without udpbatch, not by the time the queue
// takes to drain (here ~30 s).
func TestIntegrationReloadBoundedOnSlowLink(t *testing.T) {
	inNetns(t,
		[]string{"tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "10"},
		[]string{"tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit"},
		[]string{"tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:20", "htb", "rate", "32kbit"})
	reachable(t, "127.0.0.1", "127.0.0.1")
	port := coretest.FreePort(t)
	// Only the server's answers (from its port) go through the slow class.
	if out, err := exec.Command("tc", "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
		"match", "ip", "sport", port, "0xffff", "flowid", "1:20").CombinedOutput(); err != nil {
		t.Fatalf("tc filter: %v: %s", err, out)
	}
	corefile := zoneCorefile(port, zone(t))
	srv, err := coretest.New(corefile)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	to := addrPort(t, srv.UDP)
	c := newClient(t, "127.0.0.1")
	// Enough answers to fill the socket's send buffer (~212 KB by default) and queue more.
	for i := range 1200 {
		c.send(to, query(t, uint16(i), "www.example.org.", dns.TypeA, false))
	}
	c.receive()
	s := sockets(t, srv.Instance(), 1)[0]
	waitFor(t, s, "a sender stuck with answers queued behind it", func() bool { return s.busy && len(s.pending.entries) > 0 })
	start := time.Now()
	err = srv.Reload(corefile)
	took := time.Since(start)
	t.Logf("reload took %v (%v)", took.Round(time.Millisecond), err)
	if err != nil {
		t.Fatal(err)
	}
	if took > 10*time.Second {
		t.Errorf("reload blocked %v behind the answers queued on a slow link (CoreDNS's grace time is 5 s)", took.Round(time.Second))
	}
	// The link fast again, so the next instance's handlers of queries still unread at the reload
	// do not hold its stop for the grace time too.
	if out, err := exec.Command("tc", "qdisc", "del", "dev", "lo", "root").CombinedOutput(); err != nil {
		t.Fatalf("tc qdisc del: %v: %s", err, out)
	}
}
