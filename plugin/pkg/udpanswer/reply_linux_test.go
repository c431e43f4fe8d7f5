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
// returns parses as a control message, and Reply (remembered) returns the same.
func FuzzReplyOOB(f *testing.F) {
	f.Add([]byte{})
	f.Add((&ipv4.ControlMessage{Dst: net.IPv4(127, 0, 0, 2), IfIndex: 1}).Marshal())
	f.Add(pktinfo4(net.IPv4(127, 0, 0, 2), 1))
	f.Add((&ipv6.ControlMessage{Dst: net.IPv6loopback, IfIndex: 1}).Marshal())
	f.Fuzz(func(t *testing.T, oob []byte) {
		r := ReplyOOB(oob)
		if c := Reply(oob); string(c) != string(r) {
			t.Fatalf("Reply %x, ReplyOOB %x", c, r)
		}
		if r == nil {
			return
		}
		if (&ipv4.ControlMessage{}).Parse(r) != nil && (&ipv6.ControlMessage{}).Parse(r) != nil {
			t.Fatalf("reply control message %x does not parse", r)
		}
	})
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
	replies.m = make(map[string]answerOOB)
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
