//go:build linux

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

// FuzzReplyOOB: ReplyOOB takes whatever control message a query came with: it never panics, and what it
// returns parses as a control message.
func FuzzReplyOOB(f *testing.F) {
	f.Add([]byte{})
	f.Add((&ipv4.ControlMessage{Dst: net.IPv4(127, 0, 0, 2), IfIndex: 1}).Marshal())
	f.Add(pktinfo4(net.IPv4(127, 0, 0, 2), 1))
	f.Add((&ipv6.ControlMessage{Dst: net.IPv6loopback, IfIndex: 1}).Marshal())
	f.Fuzz(func(t *testing.T, oob []byte) {
		r := ReplyOOB(oob)
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

// TestReplyRemembered: Reply gives ReplyOOB's bytes, from the cache once made, and keeps at most
// replyCacheSize of them: beyond, replies are still right, made anew.
func TestReplyRemembered(t *testing.T) {
	for i := range replyCacheSize + 8 {
		oob := pktinfo4(net.IPv4(127, 77, byte(i>>8), byte(i)), 1)
		want := ReplyOOB(oob)
		for range 2 {
			got := Reply(oob)
			if string(got) != string(want) {
				t.Fatalf("control message %d: Reply %x, ReplyOOB %x", i, got, want)
			}
		}
		// IP_PKTINFO's ipi_spec_dst: the source address to use.
		if src := net.IPv4(127, 77, byte(i>>8), byte(i)).To4(); !bytes.Contains(want, src) {
			t.Fatalf("control message %d: reply %x does not carry source %s", i, want, src)
		}
	}
	replies.RLock()
	n := len(replies.m)
	replies.RUnlock()
	if n > replyCacheSize {
		t.Errorf("%d replies remembered, want at most %d", n, replyCacheSize)
	}
}
