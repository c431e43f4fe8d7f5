package udpanswer

import (
	"bytes"
	"net"
	"testing"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// FuzzReplyOOB: ReplyOOB takes whatever control message a query came with: it never panics, what it
// returns parses as a control message whose source is the query's destination (queryDst), and
// Reply (remembered) returns the same. ReplyOn, on listeners bound to one address and to every
// address, IPv4 and IPv6, returns Reply's message or none, and none only on a listener bound to
// the query's destination itself.
func FuzzReplyOOB(f *testing.F) {
	f.Add([]byte{})
	f.Add((&ipv4.ControlMessage{Dst: net.IPv4(127, 0, 0, 2), IfIndex: 1}).Marshal())
	f.Add(pktinfo4(net.IPv4(127, 0, 0, 2), 1))
	f.Add((&ipv6.ControlMessage{Dst: net.IPv6loopback, IfIndex: 1}).Marshal())
	addrs := []string{"127.0.0.2:0", "[::1]:0", "0.0.0.0:0", "[::]:0"}
	conns := make([]*net.UDPConn, 0, len(addrs))
	for _, a := range addrs {
		c, err := net.ListenPacket("udp", a)
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { c.Close() })
		conns = append(conns, c.(*net.UDPConn))
	}
	f.Fuzz(func(t *testing.T, oob []byte) {
		r := ReplyOOB(oob)
		if c := Reply(oob); string(c) != string(r) {
			t.Fatalf("Reply %x, ReplyOOB %x", c, r)
		}
		dst := queryDst(oob)
		for _, c := range conns {
			l := c.LocalAddr().(*net.UDPAddr)
			got := ReplyOn(c, oob)
			bound := !l.IP.IsUnspecified() && dst != nil && l.IP.Equal(dst)
			if bound && got != nil || !bound && string(got) != string(r) {
				t.Fatalf("listener %s, query to %s: ReplyOn %x, Reply %x", l, dst, got, r)
			}
		}
		if r == nil {
			if dst != nil {
				t.Fatalf("query to %s: no reply control message", dst)
			}
			return
		}
		if src := replySource(t, r); src == nil || !src.Equal(dst) {
			t.Fatalf("reply control message %x: source %s, the query's destination %s", r, src, dst)
		}
	})
}

// replySource is the source address an answer's control message r asks the kernel for: the
// ipi_spec_dst of its IP_PKTINFO or the ipi6_addr of its IPV6_PKTINFO (ip(7), ipv6(7)).
func replySource(t *testing.T, r []byte) net.IP {
	t.Helper()
	msgs, err := unix.ParseSocketControlMessage(r)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("reply control message %x: %d messages, %v", r, len(msgs), err)
	}
	m := msgs[0]
	switch {
	case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_PKTINFO && len(m.Data) >= unix.SizeofInet4Pktinfo:
		pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&m.Data[0]))
		return net.IP(pi.Spec_dst[:])
	case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_PKTINFO && len(m.Data) >= unix.SizeofInet6Pktinfo:
		pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&m.Data[0]))
		return net.IP(pi.Addr[:])
	}
	t.Fatalf("reply control message %x: neither IP_PKTINFO nor IPV6_PKTINFO", r)
	return nil
}

// pktinfo4 is the control message Linux gives with a datagram received on a socket with
// IP_PKTINFO: the interface and the address it was sent to.
func pktinfo4(dst net.IP, ifindex int32) []byte {
	b := make([]byte, unix.CmsgSpace(unix.SizeofInet4Pktinfo))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
	h.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
	pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&b[unix.CmsgLen(0)]))
	pi.Ifindex = ifindex
	copy(pi.Addr[:], dst.To4())
	return b
}

// TestReplyRemembered: Reply gives ReplyOOB's bytes, made once per received control message: the
// second answer to a query received with the same message takes them from the cache, without
// allocating. Beyond replyCacheSize messages the cache is emptied and fills again, so it stays
// bounded and the replies stay right.
func TestReplyRemembered(t *testing.T) {
	replies.Lock()
	saved := replies.m
	replies.m = make(map[string]*answerOOB)
	replies.Unlock()
	t.Cleanup(func() {
		replies.Lock()
		replies.m = saved
		replies.Unlock()
	})
	for i := range replyCacheSize + 8 {
		dst := net.IPv4(127, 77, byte(i>>8), byte(i))
		oob := pktinfo4(dst, 1)
		want := ReplyOOB(oob)
		// IP_PKTINFO's ipi_spec_dst: the source address to use.
		if !bytes.Contains(want, dst.To4()) {
			t.Fatalf("control message %d: reply %x does not carry source %s", i, want, dst)
		}
		first := Reply(oob)
		if string(first) != string(want) {
			t.Fatalf("control message %d: Reply %x, ReplyOOB %x", i, first, want)
		}
		if allocs := testing.AllocsPerRun(10, func() {
			if again := Reply(oob); &again[0] != &first[0] {
				t.Fatalf("control message %d: made again, not remembered", i)
			}
		}); allocs != 0 {
			t.Fatalf("control message %d: a remembered reply allocates %v times", i, allocs)
		}
		replies.RLock()
		n := len(replies.m)
		replies.RUnlock()
		if n > replyCacheSize {
			t.Fatalf("%d replies remembered, want at most %d", n, replyCacheSize)
		}
	}
}
