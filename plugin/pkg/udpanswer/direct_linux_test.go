package udpanswer

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// serve runs a miekg/dns server on pc (or, with pc nil, on the TCP listener l) whose handler
// answers every query with an A record through the writer check gives; check also reports
// whether Reset took the query's writer. decorate, when set, is the server's DecorateWriter.
func serve(t *testing.T, pc net.PacketConn, l net.Listener, decorate dns.DecorateWriter, took chan<- bool) {
	t.Helper()
	srv := &dns.Server{PacketConn: pc, Listener: l, DecorateWriter: decorate,
		Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
			m := new(dns.Msg)
			m.SetReply(r)
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 1)}}
			b, err := m.Pack()
			if err != nil {
				t.Error(err)
				return
			}
			var d Direct
			ok := d.Reset(w)
			took <- ok
			if !ok {
				w.Write(b)
				return
			}
			if _, err := d.Write(b); err != nil {
				t.Error(err)
			}
			d.Clear()
			if d.ResponseWriter != nil || d.conn != nil || d.addr != nil || d.oob != nil {
				t.Errorf("Clear kept %+v", d)
			}
		})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe() //nolint:errcheck // ends with Shutdown
	<-started
	t.Cleanup(func() { srv.Shutdown() })
}

// ask sends a query from "from" to "to" and returns the answer and the address it came from.
func ask(t *testing.T, from string, to netip.AddrPort, id uint16) (*dns.Msg, netip.AddrPort) {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(from), 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := new(dns.Msg)
	q.SetQuestion("www.example.org.", dns.TypeA)
	q.Id = id
	b, _ := q.Pack()
	if _, err := c.WriteToUDPAddrPort(b, to); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	n, got, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("asked %s: %v", to, err)
	}
	m := new(dns.Msg)
	if err := m.Unpack(buf[:n]); err != nil {
		t.Fatal(err)
	}
	return m, netip.AddrPortFrom(got.Addr().Unmap(), got.Port())
}

// TestDirectFromAddressAsked: issue 17, lever 5 (R-ZONE-1: answers as CoreDNS sends them): an
// answer sent with Direct from a listener bound to every address leaves from the address the
// client asked, as miekg/dns's Write sends it: 127.0.0.2 and 127.0.0.3 asked from 127.0.0.1 (the
// kernel would pick 127.0.0.1 without the control message), and ::1. Twice each, so the second
// answer takes the remembered control message.
func TestDirectFromAddressAsked(t *testing.T) {
	pc, err := net.ListenPacket("udp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	took := make(chan bool, 16)
	serve(t, pc, nil, nil, took)
	port := uint16(pc.LocalAddr().(*net.UDPAddr).Port)
	for i, a := range []string{"127.0.0.2", "127.0.0.3", "::1", "127.0.0.2", "::1"} {
		from := "127.0.0.1"
		if netip.MustParseAddr(a).Is6() {
			from = "::1"
		}
		to := netip.AddrPortFrom(netip.MustParseAddr(a), port)
		m, got := ask(t, from, to, uint16(i))
		if got != to || m.Id != uint16(i) || len(m.Answer) != 1 {
			t.Errorf("asked %s: answered from %s: %v", to, got, m)
		}
		if !<-took {
			t.Errorf("asked %s: Reset refused miekg/dns's UDP writer", to)
		}
	}
}

// countingWriter is a decorator's writer.
type countingWriter struct{ dns.Writer }

// TestDirectNotForDecoratedOrTCP: Reset refuses a writer whose server decorates it (what shed or
// udpbatch send must go through them) and a TCP writer; the answer goes as miekg/dns sends it.
func TestDirectNotForDecoratedOrTCP(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	took := make(chan bool, 1)
	serve(t, pc, nil, func(w dns.Writer) dns.Writer { return countingWriter{w} }, took)
	if _, err := dns.Exchange(new(dns.Msg).SetQuestion("www.example.org.", dns.TypeA), pc.LocalAddr().String()); err != nil {
		t.Fatal(err)
	}
	if <-took {
		t.Errorf("decorated writer: Reset took it")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, nil, l, nil, took)
	c := &dns.Client{Net: "tcp"}
	if _, _, err := c.Exchange(new(dns.Msg).SetQuestion("www.example.org.", dns.TypeA), l.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if <-took {
		t.Errorf("TCP writer: Reset took it")
	}
}

// TestDirectBoundListenerNoControlMessage: issue 17 (R-ZONE-1: answers as CoreDNS sends them):
// on a listener bound to one address (CoreDNS's `bind`), an answer to a query sent to that
// address goes without a control message (ReplyOn: nil) and still leaves from that address, as
// miekg/dns's Write sends it. A query the kernel handed the listener for another address (an
// sk_lookup program, TPROXY) keeps the control message that makes that address the source, and
// on a listener bound to every address ReplyOn is Reply.
func TestDirectBoundListenerNoControlMessage(t *testing.T) {
	for _, a := range []string{"127.0.0.2", "::1"} {
		pc, err := net.ListenPacket("udp", net.JoinHostPort(a, "0"))
		if err != nil {
			t.Fatal(err)
		}
		took := make(chan bool, 4)
		serve(t, pc, nil, nil, took)
		to := netip.MustParseAddrPort(pc.LocalAddr().String())
		from := "127.0.0.1"
		if to.Addr().Is6() {
			from = "::1"
		}
		m, got := ask(t, from, to, 7)
		if got != to || m.Id != 7 || len(m.Answer) != 1 {
			t.Errorf("asked %s: answered from %s: %v", to, got, m)
		}
		if !<-took {
			t.Errorf("asked %s: Reset refused miekg/dns's UDP writer", to)
		}
	}
	bound, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		t.Fatal(err)
	}
	defer bound.Close()
	wild, err := net.ListenUDP("udp", &net.UDPAddr{})
	if err != nil {
		t.Fatal(err)
	}
	defer wild.Close()
	asked, other := pktinfo4(net.IPv4(127, 0, 0, 2), 1), pktinfo4(net.IPv4(127, 0, 0, 3), 1)
	for _, c := range []struct {
		name string
		conn *net.UDPConn
		oob  []byte
		want []byte
	}{
		{"bound, asked its address", bound, asked, nil},
		{"bound, handed a query for another address", bound, other, Reply(other)},
		{"every address", wild, asked, Reply(asked)},
		{"bound, no control message received", bound, nil, nil},
	} {
		if got := ReplyOn(c.conn, c.oob); string(got) != string(c.want) || (got == nil) != (c.want == nil) {
			t.Errorf("%s: ReplyOn %x, want %x", c.name, got, c.want)
		}
	}
}
