package udpbatch

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/coredns/coredns/core/dnsserver"

	"github.com/miekg/dns"
	dto "github.com/prometheus/client_model/go"
)

func answerA(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 1)})
	w.WriteMsg(m)
}

// A wildcard listener (no bind: every local address) answers each client from the address the
// client asked, IPv4 and IPv6, also when the answers leave together in one sendmmsg: each carries
// its own IP_PKTINFO / IPV6_PKTINFO, as miekg/dns's WriteToSessionUDP gives a single answer.
func TestBatchSourceAddressWildcard(t *testing.T) {
	for _, tc := range []struct {
		network, listen string
		asked           []string
	}{
		// Dual stack, what CoreDNS opens for `.:53` and for `bind 0.0.0.0` (an AF_INET6 socket).
		{"udp", "[::]:0", []string{"127.0.0.2", "127.0.0.3", "::1", "127.0.0.1"}},
		// An IPv4-only socket (AF_INET).
		{"udp4", "0.0.0.0:0", []string{"127.0.0.2", "127.0.0.3", "127.0.0.1"}},
	} {
		t.Run(tc.network, func(t *testing.T) {
			pc, err := net.ListenPacket(tc.network, tc.listen)
			if err != nil {
				t.Fatal(err)
			}
			_, s := miekgServer(t, pc, "wildcard-"+tc.network, 64, answerA)
			port := uint16(pc.LocalAddr().(*net.UDPAddr).Port)

			// Every client asks a different address of the same socket while an answer is on
			// the wire: all answers are queued and leave in one batch.
			release := hold(t, s)
			clients := make([]*client, len(tc.asked))
			for i, a := range tc.asked {
				from := "127.0.0.1"
				if netip.MustParseAddr(a).Is6() {
					from = "::1"
				}
				clients[i] = newClient(t, from)
				clients[i].send(netip.AddrPortFrom(netip.MustParseAddr(a), port), query(t, uint16(i+1), "a.example.", dns.TypeA, false))
			}
			waitQueued(t, s, len(tc.asked))
			n0, sum0 := histogram(t, s)
			release()
			for i, a := range tc.asked {
				b, from := clients[i].receive()
				if want := netip.AddrPortFrom(netip.MustParseAddr(a), port); from != want {
					t.Errorf("client that asked %s got its answer from %s", want, from)
				}
				var m dns.Msg
				if err := m.Unpack(b); err != nil || m.Id != uint16(i+1) || len(m.Answer) != 1 {
					t.Errorf("answer to %s: %v %v", a, &m, err)
				}
			}
			// One sendmmsg carried them all.
			waitIdle(t, s)
			if n, sum := histogram(t, s); n-n0 != 1 || int(sum-sum0) != len(tc.asked) {
				t.Errorf("%d batches of %v answers, want 1 of %d", n-n0, sum-sum0, len(tc.asked))
			}
		})
	}
}

// A batch larger than max leaves in several sendmmsg calls of at most max answers.
func TestBatchMax(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, s := miekgServer(t, pc, "max", 3, answerA)
	to := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	release := hold(t, s)
	c := newClient(t, "127.0.0.1")
	for i := range 7 {
		c.send(to, query(t, uint16(i), "a.example.", dns.TypeA, false))
	}
	waitQueued(t, s, 7)
	n0, sum0 := histogram(t, s)
	release()
	for range 7 {
		c.receive()
	}
	waitIdle(t, s)
	if n, sum := histogram(t, s); n-n0 != 3 || sum-sum0 != 7 {
		t.Errorf("%d sendmmsg for %v answers, want 3 (3+3+1) for 7", n-n0, sum-sum0)
	}
}

// The queued path sends the bytes miekg/dns packed, untouched, though the caller reuses its
// buffer as soon as Write returns (io.Writer must not retain it).
func TestBatchCopiesAnswer(t *testing.T) {
	var (
		mu   sync.Mutex
		want []byte
	)
	cs := newCaptureServer(t, func(_ dns.ResponseWriter, r *dns.Msg, dw dns.Writer) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 60}, Txt: []string{"queued"}})
		b, _ := m.Pack()
		mu.Lock()
		want = append([]byte(nil), b...)
		mu.Unlock()
		// What WriteMsg does with the packed answer.
		if n, err := dw.Write(b); n != len(b) || err != nil {
			t.Errorf("Write = %d, %v", n, err)
		}
		clear(b)
	})
	s := cs.u.sockets[0]
	release := hold(t, s)
	c := newClient(t, "127.0.0.1")
	c.send(cs.addr, query(t, 7, "t.example.", dns.TypeTXT, false))
	waitQueued(t, s, 1)
	release()
	got, _ := c.receive()
	mu.Lock()
	defer mu.Unlock()
	if !bytes.Equal(got, want) {
		t.Fatalf("sent\n%x\nwant\n%x", got, want)
	}
}

// After shutdown a write goes the way miekg/dns writes: on a closed socket it returns miekg/dns's
// error, it does not panic, and a socket that starts serving afterwards is not decorated.
func TestWriteAfterShutdown(t *testing.T) {
	var (
		mu   sync.Mutex
		last dns.Writer
	)
	cs := newCaptureServer(t, func(_ dns.ResponseWriter, r *dns.Msg, dw dns.Writer) {
		m := new(dns.Msg)
		m.SetReply(r)
		b, _ := m.Pack()
		dw.Write(b)
		mu.Lock()
		last = dw
		mu.Unlock()
	})
	c := newClient(t, "127.0.0.1")
	c.exchange(cs.addr, query(t, 1, "a.example.", dns.TypeA, false))
	cs.srv.Shutdown()
	if err := cs.u.OnShutdown(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	dw := last
	mu.Unlock()
	if _, err := dw.Write([]byte{0, 1, 2}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("write after shutdown: %v, want miekg/dns's error for a closed socket", err)
	}
	if d := cs.u.decorator(&dnsserver.Server{Addr: "late"}); d != nil {
		t.Error("a socket that starts after shutdown is decorated: nothing would stop its sender")
	}
}

// A writer that is not miekg/dns's UDP writer (TCP, a PROXY protocol listener, another miekg/dns
// version) is written to directly, unchanged.
func TestUnknownWriterPassesThrough(t *testing.T) {
	s := newSocket("unknown", 8)
	var fw fakeWriter
	if n, err := s.write(&fw, []byte("abc")); n != 3 || err != nil || string(fw.got) != "abc" {
		t.Fatalf("write = %d, %v; the writer got %q", n, err, fw.got)
	}
	if _, _, _, ok := session(&fw); ok {
		t.Fatal("a foreign writer read as a miekg/dns session")
	}
}

type fakeWriter struct{ got []byte }

func (f *fakeWriter) Write(b []byte) (int, error) {
	f.got = append(f.got, b...)
	return len(b), nil
}

// A sender that panics leaves the socket usable: it is no longer busy, what was queued is counted
// as lost, later answers are written directly, and shutdown does not wait for ever.
func TestSenderPanicRecovered(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u, s := miekgServer(t, pc, "panic", 8, answerA)
	to := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	release := hold(t, s)
	c := newClient(t, "127.0.0.1")
	c.send(to, query(t, 1, "a.example.", dns.TypeA, false))
	waitQueued(t, s, 1)
	s.msgs = nil // the sender's send now panics (index out of range)
	var m0 dto.Metric
	writeErrorsTotal.WithLabelValues(s.server).Write(&m0)
	release()
	s.mu.Lock()
	off, busy := s.off, s.busy
	s.mu.Unlock()
	if !off || busy {
		t.Fatalf("after the panic: off %v busy %v, want off and not busy", off, busy)
	}
	var m1 dto.Metric
	writeErrorsTotal.WithLabelValues(s.server).Write(&m1)
	if lost := m1.GetCounter().GetValue() - m0.GetCounter().GetValue(); lost != 1 {
		t.Errorf("%v answers counted lost, want 1", lost)
	}
	if _, from := c.exchange(to, query(t, 2, "a.example.", dns.TypeA, false)); from != to {
		t.Errorf("answer from %s", from)
	}
	if err := u.OnShutdown(); err != nil {
		t.Fatal(err)
	}
}
