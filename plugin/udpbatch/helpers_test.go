package udpbatch

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"

	"github.com/miekg/dns"
	dto "github.com/prometheus/client_model/go"
)

// client is an unconnected UDP socket, so it receives an answer from whatever address the server
// sends it and the test can check which one that was.
type client struct {
	tb   testing.TB
	conn *net.UDPConn
	buf  []byte
}

func newClient(tb testing.TB, from string) *client {
	tb.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(from), 0)))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return &client{tb: tb, conn: c, buf: make([]byte, 65535)}
}

func (c *client) send(to netip.AddrPort, q []byte) {
	c.tb.Helper()
	if _, err := c.conn.WriteToUDPAddrPort(q, to); err != nil {
		c.tb.Fatal(err)
	}
}

// receive returns (a copy of) the next answer and the address it came from.
func (c *client) receive() ([]byte, netip.AddrPort) {
	c.tb.Helper()
	b, from, err := c.read()
	if err != nil {
		c.tb.Fatal(err)
	}
	return append([]byte(nil), b...), from
}

// read is receive for goroutines other than the test's. The answer is valid until the next read.
func (c *client) read() ([]byte, netip.AddrPort, error) {
	c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, from, err := c.conn.ReadFromUDPAddrPort(c.buf)
	if err != nil {
		return nil, netip.AddrPort{}, fmt.Errorf("no answer on %s: %w", c.conn.LocalAddr(), err)
	}
	return c.buf[:n], netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), nil
}

func (c *client) exchange(to netip.AddrPort, q []byte) ([]byte, netip.AddrPort) {
	c.tb.Helper()
	c.send(to, q)
	return c.receive()
}

// query packs a question with id.
func query(tb testing.TB, id uint16, name string, qtype uint16, edns bool) []byte {
	tb.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Id = id
	if edns {
		m.SetEdns0(4096, true)
	}
	b, err := m.Pack()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// hold marks s busy as a sender would, so what comes next is queued and not sent; the returned
// function sends it, as that sender. It waits for the socket to be idle first: the sender of an
// answer the test already received may not have finished. If the test ends before it calls
// release, cleanup does.
func hold(tb testing.TB, s *socket) (release func()) {
	tb.Helper()
	waitFor(tb, s, "the socket to be idle", func() bool {
		if s.busy {
			return false
		}
		s.busy = true
		return true
	})
	var once sync.Once
	release = func() { once.Do(s.flush) }
	tb.Cleanup(release)
	return release
}

// waitFor polls until cond, which reads s under its lock, holds.
func waitFor(tb testing.TB, s *socket, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		ok := cond()
		s.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitQueued polls until n answers wait in s's queue.
func waitQueued(tb testing.TB, s *socket, n int) {
	tb.Helper()
	waitFor(tb, s, fmt.Sprintf("%d answers queued", n), func() bool { return len(s.pending) == n })
}

// waitIdle polls until s's sender is done: its metrics are then final.
func waitIdle(tb testing.TB, s *socket) {
	tb.Helper()
	waitFor(tb, s, "the sender to finish", func() bool { return !s.busy })
}

// waitOff polls until s stopped batching (its instance is shutting down).
func waitOff(tb testing.TB, s *socket) {
	tb.Helper()
	waitFor(tb, s, "the socket to shut down", func() bool { return s.off })
}

// sockets returns the sockets the udpbatch directives of inst decorate, polling until there are n
// (dnsserver asks for the decorator when a socket starts serving, after caddy.Start returned).
func sockets(tb testing.TB, inst *caddy.Instance, n int) []*socket {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		inst.StorageMu.RLock()
		list, _ := inst.Storage[instanceKey{}].([]*UDPBatch)
		inst.StorageMu.RUnlock()
		var out []*socket
		for _, u := range list {
			u.mu.Lock()
			out = append(out, u.sockets...)
			u.mu.Unlock()
		}
		if len(out) >= n {
			return out
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d udpbatch sockets, want %d", len(out), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// histogram returns the number of observations of s's batch sizes and their sum.
func histogram(tb testing.TB, s *socket) (count uint64, sum float64) {
	tb.Helper()
	var m dto.Metric
	if err := batchSize.WithLabelValues(s.server).(interface{ Write(*dto.Metric) error }).Write(&m); err != nil {
		tb.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

func counter(tb testing.TB, server, path string) float64 {
	tb.Helper()
	var m dto.Metric
	if err := writesTotal.WithLabelValues(server, path).Write(&m); err != nil {
		tb.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// miekgServer serves handler on pc with udpbatch's writer decorator, as dnsserver does, and
// returns the socket state.
func miekgServer(tb testing.TB, pc net.PacketConn, name string, max int, handler dns.HandlerFunc) (*UDPBatch, *socket) {
	tb.Helper()
	u := &UDPBatch{Max: max}
	started := make(chan struct{})
	srv := &dns.Server{PacketConn: pc, Handler: handler, NotifyStartedFunc: func() { close(started) },
		DecorateWriter: u.decorator(&dnsserver.Server{Addr: name})}
	go srv.ActivateAndServe()
	<-started
	tb.Cleanup(func() {
		srv.Shutdown()
		u.OnShutdown()
	})
	return u, u.sockets[0]
}

// captureServer is a miekg/dns server whose handler also gets udpbatch's writer of its answer
// (the one WriteMsg writes through), to write raw bytes through it.
type captureServer struct {
	u    *UDPBatch
	srv  *dns.Server
	addr netip.AddrPort

	mu      sync.Mutex
	writers map[any]dns.Writer // miekg/dns's writer (also the handler's ResponseWriter) -> ours
}

func newCaptureServer(tb testing.TB, handle func(w dns.ResponseWriter, r *dns.Msg, dw dns.Writer)) *captureServer {
	tb.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	cs := &captureServer{u: &UDPBatch{Max: defaultMax}, addr: pc.LocalAddr().(*net.UDPAddr).AddrPort(), writers: map[any]dns.Writer{}}
	decorate := cs.u.decorator(&dnsserver.Server{Addr: "capture"})
	started := make(chan struct{})
	cs.srv = &dns.Server{PacketConn: pc, NotifyStartedFunc: func() { close(started) },
		DecorateWriter: func(w dns.Writer) dns.Writer {
			dw := decorate(w)
			cs.mu.Lock()
			cs.writers[w] = dw
			cs.mu.Unlock()
			return dw
		},
		Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
			cs.mu.Lock()
			dw := cs.writers[w]
			delete(cs.writers, w)
			cs.mu.Unlock()
			handle(w, r, dw)
		})}
	go cs.srv.ActivateAndServe()
	<-started
	tb.Cleanup(func() {
		cs.srv.Shutdown()
		cs.u.OnShutdown()
	})
	return cs
}
