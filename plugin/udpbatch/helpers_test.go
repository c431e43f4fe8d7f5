package udpbatch

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/request"
	"github.com/coresteer/coresteer/plugin/pkg/chain"

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

// hold marks s busy as a sender would, so the answers written next are queued and their handlers
// wait; the returned function sends them, as their sender. It waits for the socket to be idle
// first: the sender of an answer the test already received may not have finished. If the test
// ends before it calls release, cleanup does.
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
	release = func() {
		once.Do(func() {
			s.mu.Lock()
			s.sendPending()
			s.mu.Unlock()
		})
	}
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
	waitFor(tb, s, fmt.Sprintf("%d answers queued", n), func() bool { return len(s.pending.entries) == n })
}

// waitIdle polls until s's sender is done: its metrics are then final.
func waitIdle(tb testing.TB, s *socket) {
	tb.Helper()
	waitFor(tb, s, "the sender to finish", func() bool { return !s.busy })
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

// miekgServer serves next on pc as dnsserver does: udpbatch's writer decorator on the socket, the
// ResponseWriter wrapped in a ScrubWriter, udpbatch's ServeDNS before next. It returns the
// directive and the socket state.
func miekgServer(tb testing.TB, pc net.PacketConn, name string, max int, next plugin.HandlerFunc) (*UDPBatch, *socket) {
	tb.Helper()
	u := &UDPBatch{Max: max, Next: next}
	started := make(chan struct{})
	srv := &dns.Server{PacketConn: pc, NotifyStartedFunc: func() { close(started) },
		DecorateWriter: u.decorator(&dnsserver.Server{Addr: name}),
		Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
			u.ServeDNS(context.Background(), request.NewScrubWriter(r, w), r)
		})}
	go srv.ActivateAndServe()
	<-started
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.ShutdownContext(ctx)
	})
	return u, u.sockets[0]
}

// answerA answers with an A record, with WriteMsg.
func answerA(_ context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 1)})
	return dns.RcodeSuccess, w.WriteMsg(m)
}

// registerDirective registers a test directive whose setup is setup and puts it in the chain
// right before the directive before, or last when before is "". Once per name and process.
func registerDirective(name, before string, setup caddy.SetupFunc) {
	plugin.Register(name, setup)
	chain.Install()
	d := slices.Clone(dnsserver.Directives)
	if i := slices.Index(d, before); i >= 0 {
		d = slices.Insert(d, i, name)
	} else {
		d = append(d, name)
	}
	dnsserver.Directives = d
}

// written keeps the answers a handler wrote, by message ID.
type written struct {
	mu sync.Mutex
	m  map[uint16][]byte
}

func newWritten() *written { return &written{m: map[uint16][]byte{}} }

// answerPacked answers with an A record packed by the handler and written with the
// ResponseWriter's Write, as routingpolicy writes its pre-packed answers; it keeps what it wrote,
// and clears its buffer as soon as Write returned.
func (ws *written) answerPacked(_ context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, byte(r.Id))})
	b, err := m.Pack()
	if err != nil {
		return dns.RcodeServerFailure, err
	}
	ws.mu.Lock()
	ws.m[r.Id] = append([]byte(nil), b...)
	ws.mu.Unlock()
	n, err := w.Write(b)
	if err == nil && n != len(b) {
		err = fmt.Errorf("wrote %d of %d bytes", n, len(b))
	}
	clear(b)
	return dns.RcodeSuccess, err
}

// batchFive queues five queries to s's listener at to and sends them as one batch: one sendmmsg
// carries the five answers, each byte for byte what the handler wrote, as ws kept it.
func batchFive(tb testing.TB, s *socket, to netip.AddrPort, ws *written) {
	tb.Helper()
	c := newClient(tb, "127.0.0.1")
	release := hold(tb, s)
	for i := range 5 {
		c.send(to, query(tb, uint16(100+i), "www.example.org.", dns.TypeA, false))
	}
	waitQueued(tb, s, 5)
	n0, sum0 := histogram(tb, s)
	release()
	for range 5 {
		got, _ := c.receive()
		var m dns.Msg
		if err := m.Unpack(got); err != nil {
			tb.Fatal(err)
		}
		ws.mu.Lock()
		want := ws.m[m.Id]
		ws.mu.Unlock()
		if !bytes.Equal(got, want) {
			tb.Errorf("answer %d sent\n%x\nwritten\n%x", m.Id, got, want)
		}
	}
	if n, sum := histogram(tb, s); n-n0 != 1 || sum-sum0 != 5 {
		tb.Errorf("%d sendmmsg for %v answers, want 1 for 5", n-n0, sum-sum0)
	}
}
