package udpbatch

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
	dto "github.com/prometheus/client_model/go"
)

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

// A handler that answers with the ResponseWriter's Write (packed bytes, as routingpolicy's
// pre-packed answers are written) goes through the batch too: udpbatch's ServeDNS puts its writer
// under dnsserver's ScrubWriter. The answers leave in one sendmmsg, each byte for byte what its
// handler wrote, though every handler clears its buffer as soon as Write returns (Write returns
// once the answer is sent, so the bytes need no copy).
func TestBatchWriteBytes(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ws := newWritten()
	_, s := miekgServer(t, pc, "write-bytes", 64, ws.answerPacked)
	batchFive(t, s, pc.LocalAddr().(*net.UDPAddr).AddrPort(), ws)
}

// A handler whose answer is queued returns only once its batch has been sent: miekg/dns, which
// waits for its handlers before it closes the socket on stop or reload, thereby waits for the
// answers too, and nothing of udpbatch is left to send afterwards.
func TestBatchHandlerReturnsAfterSend(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var s *socket
	left := make(chan int, 1) // answers still queued when the handler's WriteMsg returned
	_, s = miekgServer(t, pc, "returns-after-send", 64, func(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
		rc, err := answerA(ctx, w, r)
		s.mu.Lock()
		left <- len(s.pending.entries)
		s.mu.Unlock()
		return rc, err
	})
	c := newClient(t, "127.0.0.1")
	release := hold(t, s)
	c.send(pc.LocalAddr().(*net.UDPAddr).AddrPort(), query(t, 1, "a.example.", dns.TypeA, false))
	waitQueued(t, s, 1)
	release()
	if n := <-left; n != 0 {
		t.Errorf("the handler returned with its answer still queued (%d queued)", n)
	}
	c.receive()
}

// Each handler gets the result of its own answer: in a batch where one answer cannot be sent
// (too large for a datagram), that handler's Write fails with the system's error and the
// others' succeed and are sent.
func TestBatchErrorsToTheirHandler(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		errs = map[uint16]error{}
	)
	_, s := miekgServer(t, pc, "errors", 64, func(_ context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
		m := new(dns.Msg)
		m.SetReply(r)
		b, _ := m.Pack()
		if r.Id == 2 {
			b = append(b, make([]byte, 70000)...) // more than a UDP datagram holds
		}
		_, err := w.Write(b)
		mu.Lock()
		errs[r.Id] = err
		mu.Unlock()
		return dns.RcodeSuccess, nil
	})
	var m0 dto.Metric
	writeErrorsTotal.WithLabelValues(s.server).Write(&m0)
	to := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	c := newClient(t, "127.0.0.1")
	release := hold(t, s)
	for id := range uint16(3) {
		c.send(to, query(t, id+1, "a.example.", dns.TypeA, false))
	}
	waitQueued(t, s, 3)
	release()
	got := map[uint16]bool{}
	for range 2 {
		b, _ := c.receive()
		var m dns.Msg
		if err := m.Unpack(b); err != nil {
			t.Fatal(err)
		}
		got[m.Id] = true
	}
	if !got[1] || !got[3] {
		t.Errorf("answers %v received, want 1 and 3", got)
	}
	waitFor(t, s, "every handler's result", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(errs) == 3
	})
	mu.Lock()
	defer mu.Unlock()
	if errs[1] != nil || errs[3] != nil || !errors.Is(errs[2], syscall.EMSGSIZE) {
		t.Errorf("results %v, want nil for 1 and 3, EMSGSIZE for 2", errs)
	}
	var m1 dto.Metric
	writeErrorsTotal.WithLabelValues(s.server).Write(&m1)
	if n := m1.GetCounter().GetValue() - m0.GetCounter().GetValue(); n != 1 {
		t.Errorf("%v send errors counted, want 1", n)
	}
}

// After the server stopped (miekg/dns closed its socket), a write returns the error for a closed
// socket to its handler, as miekg/dns's does, and does not panic.
func TestWriteAfterShutdown(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	writers := make(chan dns.ResponseWriter, 1)
	_, s := miekgServer(t, pc, "after-shutdown", 64, func(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
		select {
		case writers <- w:
		default:
		}
		return answerA(ctx, w, r)
	})
	c := newClient(t, "127.0.0.1")
	c.exchange(pc.LocalAddr().(*net.UDPAddr).AddrPort(), query(t, 1, "a.example.", dns.TypeA, false))
	w := <-writers
	waitIdle(t, s)
	pc.Close()
	if _, err := w.Write([]byte{0, 1, 2}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("write after the socket closed: %v, want the error for a closed socket", err)
	}
}

// A writer that is not miekg/dns's UDP writer as udpbatch knows it (another miekg/dns version)
// is not decorated: its answers are written as without udpbatch, and the log says batching is
// off and why, once per socket.
func TestUnknownWriterNotDecorated(t *testing.T) {
	logs := coretest.CaptureLog(t)
	s := newSocket("unknown", 8)
	var fw fakeWriter
	for range 2 {
		if w := s.decorate(&fw); w != dns.Writer(&fw) {
			t.Fatalf("a foreign writer was decorated: %T", w)
		}
	}
	if n := logs.Count("Batching is off on unknown", "*udpbatch.fakeWriter", "as without udpbatch"); n != 1 {
		t.Errorf("%d lines saying why batching is off, want 1:\n%s", n, logs)
	}
	if batched(&fw) != nil {
		t.Error("a foreign ResponseWriter read as miekg/dns's")
	}
}

type fakeWriter struct{ dns.ResponseWriter }

// A sender that panics leaves the socket usable: it is no longer busy, the handler of the answer
// not sent gets an error, it is counted as lost, later answers are written directly.
func TestSenderPanicRecovered(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 2)
	_, s := miekgServer(t, pc, "panic", 8, func(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
		rc, err := answerA(ctx, w, r)
		results <- err
		return rc, err
	})
	to := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	release := hold(t, s)
	c := newClient(t, "127.0.0.1")
	c.send(to, query(t, 1, "a.example.", dns.TypeA, false))
	waitQueued(t, s, 1)
	s.msgs = nil // the sender's send now panics (index out of range)
	var m0 dto.Metric
	writeErrorsTotal.WithLabelValues(s.server).Write(&m0)
	release()
	if err := <-results; !errors.Is(err, errNotSent) {
		t.Errorf("the handler of the answer not sent got %v, want %v", err, errNotSent)
	}
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
	direct := counter(t, s.server, "direct")
	if _, from := c.exchange(to, query(t, 2, "a.example.", dns.TypeA, false)); from != to {
		t.Errorf("answer from %s", from)
	}
	if err := <-results; err != nil || counter(t, s.server, "direct") != direct+1 {
		t.Errorf("after the panic: %v, direct writes %v -> %v, want a direct write", err, direct, counter(t, s.server, "direct"))
	}
}
