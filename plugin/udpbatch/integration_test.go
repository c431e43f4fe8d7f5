package udpbatch

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
	"go.uber.org/goleak"
)

// zone writes a zone whose answers have several shapes: plain, CNAME chain, NODATA, NXDOMAIN,
// and one too large for 512 bytes (truncated without EDNS).
func zone(tb testing.TB) string {
	tb.Helper()
	var big strings.Builder
	for i := range 40 {
		fmt.Fprintf(&big, "big IN TXT \"%s\"\n", strings.Repeat(string(rune('a'+i%26)), 40))
	}
	f := filepath.Join(tb.TempDir(), "db.example.org")
	z := `$ORIGIN example.org.
@ 3600 IN SOA ns.example.org. hostmaster.example.org. 1 7200 3600 1209600 3600
@ IN NS ns.example.org.
ns IN A 192.0.2.53
www IN A 192.0.2.1
www IN A 192.0.2.2
www IN AAAA 2001:db8::1
alias IN CNAME www.example.org.
` + big.String()
	if err := os.WriteFile(f, []byte(z), 0o600); err != nil {
		tb.Fatal(err)
	}
	return f
}

// zoneCorefile is a server block on 127.0.0.1:port serving the zone file z, with udpbatch and,
// before it, the directives extra.
func zoneCorefile(port, z string, extra ...string) string {
	return "example.org:" + port + " {\n\tbind 127.0.0.1\n\t" + strings.Join(append(extra, "udpbatch"), "\n\t") +
		"\n\tfile " + z + "\n}"
}

// questions are the shapes the zone answers, by name and type, with and without EDNS (DO set).
var questions = []struct {
	name  string
	qtype uint16
}{
	{"www.example.org.", dns.TypeA},
	{"WwW.ExAmPlE.oRg.", dns.TypeAAAA},
	{"alias.example.org.", dns.TypeA},
	{"www.example.org.", dns.TypeMX},
	{"nope.example.org.", dns.TypeA},
	{"big.example.org.", dns.TypeTXT},
	{"example.org.", dns.TypeSOA},
}

func addrPort(tb testing.TB, s string) netip.AddrPort {
	tb.Helper()
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		tb.Fatal(err)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// Answers sent through the queue are the bytes an unbatched server sends, for every shape: two
// server blocks serve the same zone, one with udpbatch, and each question goes to both.
func TestIntegrationAnswersIdentical(t *testing.T) {
	z := zone(t)
	pb, pp := coretest.FreePort(t), coretest.FreePort(t)
	srv := coretest.Start(t, `example.org:`+pb+` {
	bind 127.0.0.1
	udpbatch
	file `+z+`
}
example.org:`+pp+` {
	bind 127.0.0.1
	file `+z+`
}`)
	batched, plain := "127.0.0.1:"+pb, "127.0.0.1:"+pp
	c := newClient(t, "127.0.0.1")
	// Warm: the first answer is written at once (the socket is idle) and makes the socket known.
	c.exchange(addrPort(t, batched), query(t, 1, "www.example.org.", dns.TypeA, false))
	s := sockets(t, srv.Instance(), 1)[0]

	type q struct {
		id uint16
		b  []byte
	}
	qs := make([]q, 0, 2*len(questions))
	for i, qu := range questions {
		for _, edns := range []bool{false, true} {
			id := uint16(100 + 2*i)
			if edns {
				id++
			}
			qs = append(qs, q{id, query(t, id, qu.name, qu.qtype, edns)})
		}
	}
	want := map[uint16][]byte{}
	for _, qu := range qs {
		b, _ := c.exchange(addrPort(t, plain), qu.b)
		want[qu.id] = b
	}

	release := hold(t, s)
	for _, qu := range qs {
		c.send(addrPort(t, batched), qu.b)
	}
	waitQueued(t, s, len(qs))
	release()
	for range qs {
		b, _ := c.receive()
		var m dns.Msg
		if err := m.Unpack(b); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, want[m.Id]) {
			t.Errorf("answer %d through the queue:\n%x\nunbatched:\n%x", m.Id, b, want[m.Id])
		}
		delete(want, m.Id)
	}
	if len(want) != 0 {
		t.Errorf("%d answers missing", len(want))
	}
	var tc dns.Msg
	if b, _ := c.exchange(addrPort(t, batched), query(t, 9, "big.example.org.", dns.TypeTXT, false)); tc.Unpack(b) != nil || !tc.Truncated {
		t.Error("the large answer without EDNS is not truncated: the test does not cover TC")
	}
}

// testpackedanswer is a plugin, last in the chain, that answers with the ResponseWriter's Write
// (written.answerPacked).
const packedAnswer = "testpackedanswer"

var packedWritten = newWritten()

var registerPackedAnswer = sync.OnceFunc(func() {
	registerDirective(packedAnswer, "", func(c *caddy.Controller) error {
		for c.Next() {
		}
		dnsserver.GetConfig(c).AddPlugin(func(plugin.Handler) plugin.Handler { return plugin.HandlerFunc(packedWritten.answerPacked) })
		return nil
	})
})

// A plugin that answers with the ResponseWriter's Write, behind dnsserver's ScrubWriter and the
// wrappers of the plugins before and after udpbatch (CoreDNS wraps the writer between any two;
// nsid wraps it too), is batched: five answers queued leave in one sendmmsg, each byte for byte
// what the plugin wrote.
func TestIntegrationWriteBytesBatched(t *testing.T) {
	registerPackedAnswer()
	for _, before := range []string{"", "metadata\n\tnsid"} {
		t.Run(before, func(t *testing.T) {
			srv := coretest.Start(t, `example.org:0 {
	bind 127.0.0.1
	`+before+`
	udpbatch
	prometheus localhost:0
	`+packedAnswer+`
}`)
			batchFive(t, sockets(t, srv.Instance(), 1)[0], addrPort(t, srv.UDP), packedWritten)
		})
	}
}

// A server listening on every address (no bind, or bind 0.0.0.0) answers each client from the
// address it asked: 127.0.0.2, 127.0.0.3 and ::1, when the socket is idle (the answer is written
// at once) and when the answers are queued and leave together. The port is the one the kernel
// gave the wildcard listener (a port free on 127.0.0.1 may be taken on another address).
func TestIntegrationSourceAddressWildcard(t *testing.T) {
	z := zone(t)
	for _, tc := range []struct {
		bind  string
		asked []string
	}{
		{"", []string{"127.0.0.2", "127.0.0.3", "::1"}},
		{"bind 0.0.0.0", []string{"127.0.0.2", "127.0.0.3"}},
	} {
		t.Run(tc.bind, func(t *testing.T) {
			srv := coretest.Start(t, `example.org:0 {
	`+tc.bind+`
	udpbatch
	file `+z+`
}`)
			port := addrPort(t, srv.UDP).Port()
			to := func(a string) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(a), port) }
			from := func(a string) string {
				if netip.MustParseAddr(a).Is6() {
					return "::1"
				}
				return "127.0.0.1"
			}
			var clients []*client
			for i, a := range tc.asked {
				c := newClient(t, from(a))
				clients = append(clients, c)
				// Idle: written at once.
				if _, got := c.exchange(to(a), query(t, uint16(i), "www.example.org.", dns.TypeA, false)); got != to(a) {
					t.Errorf("idle: asked %s, answered from %s", to(a), got)
				}
			}
			s := sockets(t, srv.Instance(), 1)[0]
			release := hold(t, s)
			for i, a := range tc.asked {
				clients[i].send(to(a), query(t, uint16(i), "www.example.org.", dns.TypeA, false))
			}
			waitQueued(t, s, len(tc.asked))
			release()
			for i, a := range tc.asked {
				if _, got := clients[i].receive(); got != to(a) {
					t.Errorf("queued: asked %s, answered from %s", to(a), got)
				}
			}
		})
	}
}

// A burst of concurrent queries is answered in full, each answer once, every answer counted on
// one of the three paths, and the answers are batched: some queued, more than one per sendmmsg on
// average. In flight at once: clients x window queries, well within the socket's receive buffer,
// so the kernel drops none of them.
func TestIntegrationBurst(t *testing.T) {
	srv := coretest.Start(t, `example.org:0 {
	bind 127.0.0.1
	udpbatch 16
	file `+zone(t)+`
}`)
	to := addrPort(t, srv.UDP)
	c := newClient(t, "127.0.0.1")
	c.exchange(to, query(t, 1, "www.example.org.", dns.TypeA, false))
	s := sockets(t, srv.Instance(), 1)[0]
	waitIdle(t, s)
	total := func() float64 {
		return counter(t, s.server, "direct") + counter(t, s.server, "queued") + counter(t, s.server, "overflow")
	}
	before, queued0 := total(), counter(t, s.server, "queued")
	n0, sum0 := histogram(t, s)

	const clients, window, each = 20, 5, 50
	var (
		wg   sync.WaitGroup
		errs = make(chan error, clients)
		qs   = make([][][]byte, clients)
	)
	for i := range clients {
		qs[i] = make([][]byte, each)
		for j := range each {
			qs[i][j] = query(t, uint16(j), "www.example.org.", dns.TypeA, false)
		}
	}
	for i := range clients {
		c := newClient(t, "127.0.0.1")
		wg.Go(func() {
			seen := map[uint16]bool{}
			sent := 0
			for len(seen) < each {
				for sent < each && sent-len(seen) < window {
					if _, err := c.conn.WriteToUDPAddrPort(qs[i][sent], to); err != nil {
						errs <- err
						return
					}
					sent++
				}
				b, _, err := c.read()
				if err != nil {
					errs <- fmt.Errorf("client %d, %d of %d answered: %w", i, len(seen), each, err)
					return
				}
				var m dns.Msg
				if err := m.Unpack(b); err != nil || len(m.Answer) != 2 {
					errs <- fmt.Errorf("bad answer %v: %v", &m, err)
					return
				}
				if seen[m.Id] {
					errs <- fmt.Errorf("client %d: answer %d twice", i, m.Id)
					return
				}
				seen[m.Id] = true
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Counted before they are sent: every answer received is counted. The batch sizes are
	// observed once sendmmsg returned: final when the socket is idle.
	if got := total() - before; got != clients*each {
		t.Errorf("%v answers counted, want %d", got, clients*each)
	}
	waitIdle(t, s)
	queued := counter(t, s.server, "queued") - queued0
	n, sum := histogram(t, s)
	calls, sent := float64(n-n0), sum-sum0
	t.Logf("direct %v, queued %v, overflow %v; %v sendmmsg calls carried %v answers", counter(t, s.server, "direct"),
		queued, counter(t, s.server, "overflow"), calls, sent)
	if queued == 0 || sent != queued {
		t.Errorf("%v answers queued, %v sent by sendmmsg: want all queued ones sent, and some", queued, sent)
	}
	if calls == 0 || sent/calls <= 1 {
		t.Errorf("%v answers in %v sendmmsg calls: no batching under load", sent, calls)
	}
}

// TCP does not go through udpbatch: answered, and not counted.
func TestIntegrationTCPUnaffected(t *testing.T) {
	srv := coretest.Start(t, zoneCorefile("0", zone(t)))
	c := newClient(t, "127.0.0.1")
	c.exchange(addrPort(t, srv.UDP), query(t, 1, "www.example.org.", dns.TypeA, false))
	s := sockets(t, srv.Instance(), 1)[0]
	before := counter(t, s.server, "direct") + counter(t, s.server, "queued")
	release := hold(t, s) // a UDP answer on the wire does not hold TCP up
	defer release()
	m := new(dns.Msg)
	m.SetQuestion("big.example.org.", dns.TypeTXT)
	r, _, err := (&dns.Client{Net: "tcp", Timeout: 5 * time.Second}).Exchange(m, srv.TCP)
	if err != nil || r.Truncated || len(r.Answer) != 40 {
		t.Fatalf("TCP answer %v: %v", r, err)
	}
	if after := counter(t, s.server, "direct") + counter(t, s.server, "queued"); after != before {
		t.Errorf("TCP answer counted as UDP writes: %v -> %v", before, after)
	}
}

// Answers queued when the server stops are sent before it closes its socket: their handlers wait
// for them, and miekg/dns waits for its handlers (up to CoreDNS's grace time). Stop returns once
// they are sent, and no goroutine of ours is left.
func TestIntegrationShutdownSendsQueued(t *testing.T) {
	defer coretest.NoLeak(t, append(coretest.ServerLoops(), goleak.IgnoreCurrent())...)
	srv, err := coretest.New(zoneCorefile("0", zone(t)))
	if err != nil {
		t.Fatal(err)
	}
	tcp := srv.TCP
	c, _, release := queueFive(t, srv)
	stopped := make(chan struct{})
	go func() {
		srv.Stop()
		close(stopped)
	}()
	// The TCP listener is closed: the stop began (the UDP server stops beside it).
	for deadline := time.Now().Add(10 * time.Second); ; {
		conn, err := net.Dial("tcp", tcp)
		if err != nil {
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("the server does not stop")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-stopped:
		t.Fatal("the server stopped with answers queued")
	default:
	}
	release()
	<-stopped
	for range 5 {
		if b, _ := c.receive(); len(b) == 0 {
			t.Fatal("empty answer")
		}
	}
}

// A reload with answers queued: they are sent, the next instance answers on the handed-over
// socket, and nothing of the old instance is left.
func TestIntegrationReloadSendsQueued(t *testing.T) {
	defer coretest.NoLeak(t, append(coretest.ServerLoops(), goleak.IgnoreCurrent())...)
	port := coretest.FreePort(t)
	corefile := zoneCorefile(port, zone(t))
	srv, err := coretest.New(corefile)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	to := addrPort(t, srv.UDP)
	c, _, release := queueFive(t, srv)
	reloaded := make(chan error, 1)
	go func() { reloaded <- srv.Reload(corefile) }()
	// The reload cannot complete before: the old server waits for the handlers of the queued
	// answers. Whether it has reached that wait when they are sent or not, they are sent once.
	release()
	if err := <-reloaded; err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if b, _ := c.receive(); len(b) == 0 {
			t.Fatal("empty answer")
		}
	}
	for i := range 3 {
		if _, from := c.exchange(to, query(t, uint16(20+i), "www.example.org.", dns.TypeA, false)); from != to {
			t.Fatalf("answer from %s after the reload", from)
		}
	}
	srv.Stop()
}

// queueFive has five answers of srv queued, not sent, and returns the client waiting for them,
// the socket and the function that sends them.
func queueFive(t *testing.T, srv *coretest.Server) (*client, *socket, func()) {
	t.Helper()
	to := addrPort(t, srv.UDP)
	c := newClient(t, "127.0.0.1")
	c.exchange(to, query(t, 1, "www.example.org.", dns.TypeA, false))
	s := sockets(t, srv.Instance(), 1)[0]
	release := hold(t, s)
	for i := range 5 {
		c.send(to, query(t, uint16(10+i), "www.example.org.", dns.TypeA, false))
	}
	waitQueued(t, s, 5)
	return c, s, release
}

// With multisocket, each listener socket has its own queue and sender: answers queued on both
// leave in one sendmmsg per socket, each on its own socket. 32 clients (each its own source port,
// which SO_REUSEPORT hashes to a socket) leave a socket with fewer than two answers with a
// probability below 1e-8.
func TestIntegrationMultisocket(t *testing.T) {
	// A port of our own: with port 0 each socket of the group would get a port of its own.
	srv := coretest.Start(t, zoneCorefile(coretest.FreePort(t), zone(t), "multisocket 2"))
	to := addrPort(t, srv.UDP)
	socks := sockets(t, srv.Instance(), 2)
	if len(socks) != 2 || socks[0] == socks[1] {
		t.Fatalf("%d sockets, want 2 of their own", len(socks))
	}
	const clients = 32
	releases := make([]func(), 0, len(socks))
	for _, s := range socks {
		releases = append(releases, hold(t, s))
	}
	cs := make([]*client, clients)
	for i := range cs {
		cs[i] = newClient(t, "127.0.0.1")
		cs[i].send(to, query(t, uint16(i), "www.example.org.", dns.TypeA, false))
	}
	waitFor(t, socks[0], "every answer queued", func() bool {
		socks[1].mu.Lock()
		defer socks[1].mu.Unlock()
		return len(socks[0].pending.entries)+len(socks[1].pending.entries) == clients
	})
	// Both sockets have the same address, hence the same metric series: sent one after the
	// other, each socket's batch shows as one sendmmsg call of its own answers.
	for i, s := range socks {
		s.mu.Lock()
		queued := len(s.pending.entries)
		s.mu.Unlock()
		n0, sum0 := histogram(t, s)
		releases[i]()
		n, sum := histogram(t, s)
		if queued < 2 || n-n0 != 1 || int(sum-sum0) != queued {
			t.Errorf("socket %d: %d answers queued, sent in %d sendmmsg carrying %v: want one batch of its own, of 2 or more", i, queued, n-n0, sum-sum0)
		}
	}
	for _, c := range cs {
		if b, _ := c.receive(); len(b) == 0 {
			t.Fatal("empty answer")
		}
	}
}
