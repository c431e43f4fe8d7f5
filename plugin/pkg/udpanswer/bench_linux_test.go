package udpanswer

import (
	"net"
	"testing"
	"unsafe"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"
)

// BenchmarkSend: one answer's send on loopback as miekg/dns's Write makes it (WriteToSessionUDP:
// the reply's control message parsed and made for the answer) and as Direct makes it (the same
// sendmsg with the control message Reply remembers), and as Direct makes it on a listener bound
// to one address (no control message: ReplyOn).
//
//	go test -run '^$' -bench BenchmarkSend -benchmem ./plugin/pkg/udpanswer/
func BenchmarkSend(b *testing.B) {
	srv, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4zero})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	if err := ipv4.NewPacketConn(srv).SetControlMessage(ipv4.FlagDst|ipv4.FlagInterface, true); err != nil {
		b.Fatal(err)
	}
	sink, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close()
	go func() { // drain, so the sink's buffer never fills
		buf := make([]byte, 512)
		for {
			if _, err := sink.Read(buf); err != nil {
				return
			}
		}
	}()
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: srv.LocalAddr().(*net.UDPAddr).Port}
	if _, err := sink.WriteToUDP(make([]byte, 12), to); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 512)
	_, sess, err := dns.ReadFromSessionUDP(srv, buf)
	if err != nil {
		b.Fatal(err)
	}
	oob := *(*[]byte)(unsafe.Add(unsafe.Pointer(sess), sessionContext))
	addr := sess.RemoteAddr().(*net.UDPAddr)
	answer := make([]byte, 60)

	b.Run("miekg", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := dns.WriteToSessionUDP(srv, answer, sess); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		d := Direct{conn: srv, addr: addr, oob: Reply(oob)}
		for b.Loop() {
			if _, err := d.Write(answer); err != nil {
				b.Fatal(err)
			}
		}
	})
	bound, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		b.Fatal(err)
	}
	defer bound.Close()
	b.Run("direct-bound", func(b *testing.B) {
		b.ReportAllocs()
		d := Direct{conn: bound, addr: addr, oob: ReplyOn(bound, pktinfo4(net.IPv4(127, 0, 0, 2), 1))}
		if d.oob != nil {
			b.Fatalf("bound listener: control message %x", d.oob)
		}
		for b.Loop() {
			if _, err := d.Write(answer); err != nil {
				b.Fatal(err)
			}
		}
	})
}
