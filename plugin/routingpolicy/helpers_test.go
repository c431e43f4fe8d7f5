package routingpolicy

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"
	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/region"

	"github.com/miekg/dns"
)

// fixedNow is the load time of test data.
var fixedNow = time.Unix(1_700_000_000, 0)

// newTest builds a handler from a routingpolicy block, on its own board, with a seeded PRNG,
// started (targets acquired) and shut down at the end of the test.
func newTest(tb testing.TB, block string) (*RoutingPolicy, *health.Board) {
	tb.Helper()
	c := caddy.NewTestController("dns", block)
	cfgs, err := parse(c)
	if err != nil {
		tb.Fatalf("parse: %v", err)
	}
	d, err := cfgs[0].load(fixedNow)
	if err != nil {
		tb.Fatalf("load: %v", err)
	}
	b := health.NewBoard(countingClock())
	rp := New(cfgs[0], d)
	rp.board = b
	rp.rnd = rand.New(rand.NewPCG(1, 2)).Uint64
	if err := rp.OnStartup(nil); err != nil {
		tb.Fatal(err)
	}
	// As in a server block with no plugin before routingpolicy (packedPath); askMsg reads the
	// bytes back, bothWays compares them with the WriteMsg path.
	rp.packed = true
	tb.Cleanup(func() { rp.OnShutdown() })
	return rp, b
}

// countingClock is a board clock that moves on a nanosecond from fixedNow at every reading, so
// coretest.Held can tell a target held from one it creates.
func countingClock() func() time.Time {
	var n atomic.Int64
	return func() time.Time { return fixedNow.Add(time.Duration(n.Add(1))) }
}

// loadErr returns the error of parsing and loading block, or nil.
func loadErr(block string) error {
	c := caddy.NewTestController("dns", block)
	cfgs, err := parse(c)
	if err != nil {
		return err
	}
	for _, cfg := range cfgs {
		if _, err := cfg.load(fixedNow); err != nil {
			return err
		}
	}
	return nil
}

// testSource gives rrs to build as the records of one source, as the Corefile's are.
func testSource(rrs []dns.RR) []recordSource {
	return []recordSource{{name: "the test", rrs: rrs}}
}

// set publishes k on b and gives it state s, as a healthcheck would.
func set(b *health.Board, check, ip string, s health.State) {
	k := health.Key{Check: check, Addr: netip.MustParseAddr(ip)}
	m := published[b]
	if m == nil {
		m = map[health.Key]*health.Target{}
		published[b] = m
	}
	t := m[k]
	if t == nil {
		t = b.Acquire(k)
		b.Publish(t)
		m[k] = t
	}
	b.Set(t, s, "test")
}

// published holds what set published, by board: the tests' own references.
var published = map[*health.Board]map[health.Key]*health.Target{}

// ask sends name/qtype from client to rp and returns the answer.
func ask(tb testing.TB, rp *RoutingPolicy, name string, qtype uint16, client string) *dns.Msg {
	tb.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	return askMsg(tb, rp, m, client)
}

func askMsg(tb testing.TB, rp *RoutingPolicy, m *dns.Msg, client string) *dns.Msg {
	tb.Helper()
	w := newServerWriter(client)
	// Through the ScrubWriter a server wraps every query's writer in: it truncates what does not
	// fit the client's buffer.
	if _, err := rp.ServeDNS(context.Background(), request.NewScrubWriter(m, w), m); err != nil {
		tb.Fatalf("ServeDNS: %v", err)
	}
	return w.answer(tb)
}

// serverWriter stands for miekg/dns's writer of a query in a real server: WriteMsg packs the
// message (dns.Msg.Pack, as miekg/dns's response.WriteMsg does) and Write takes packed bytes.
type serverWriter struct {
	test.ResponseWriter
	addr net.Addr
	msg  *dns.Msg // the last message given to WriteMsg
	last []byte   // the wire form of the last answer, however it was written
	// packed is set when the last answer was written with Write.
	packed bool
}

// newServerWriter returns a serverWriter for a UDP query from client (an IP address).
func newServerWriter(client string) *serverWriter {
	return &serverWriter{addr: &net.UDPAddr{IP: net.ParseIP(client), Port: 40212}}
}

func (w *serverWriter) RemoteAddr() net.Addr { return w.addr }

func (w *serverWriter) WriteMsg(m *dns.Msg) error {
	w.msg, w.last, w.packed = m, nil, false
	b, err := m.Pack()
	if err != nil {
		return err
	}
	w.last = b
	return nil
}

func (w *serverWriter) Write(b []byte) (int, error) {
	// A copy, as a writer must make: b is reused for the next answer.
	w.msg, w.last, w.packed = nil, append(w.last[:0], b...), true
	return len(b), nil
}

// answer returns the last answer: the message given to WriteMsg, or the bytes given to Write,
// unpacked.
func (w *serverWriter) answer(tb testing.TB) *dns.Msg {
	tb.Helper()
	if w.msg != nil {
		return w.msg
	}
	if w.last == nil {
		tb.Fatalf("no answer written")
	}
	m := new(dns.Msg)
	if err := m.Unpack(w.last); err != nil {
		tb.Fatalf("the packed answer does not unpack: %v\n%x", err, w.last)
	}
	return m
}

// bothWays asks rp the query m from addr twice, through the ScrubWriter CoreDNS wraps every
// query's writer in: once writing packed bytes (writePacked), once a dns.Msg (WriteMsg). Both
// draw the same random numbers. It fails unless the bytes sent are the same, and returns them
// and whether the first way wrote them as packed bytes (it falls back to WriteMsg where CoreDNS
// would truncate or compress).
func bothWays(tb testing.TB, rp *RoutingPolicy, m *dns.Msg, addr net.Addr) (wire []byte, packed bool) {
	tb.Helper()
	rnd, was := rp.rnd, rp.packed
	defer func() { rp.rnd, rp.packed = rnd, was }()
	seed := rnd()
	run := func(p bool) *serverWriter {
		rp.packed = p
		rp.rnd = rand.New(rand.NewPCG(seed, 1)).Uint64
		w := &serverWriter{addr: addr}
		q := m.Copy() // SizeAndDo changes the query's OPT record
		rp.ServeDNS(context.Background(), request.NewScrubWriter(q, w), q)
		return w
	}
	fast, slow := run(true), run(false)
	if slow.packed {
		tb.Fatalf("%v: written with Write while packed answers are off", m.Question)
	}
	if !bytes.Equal(fast.last, slow.last) {
		show := func(b []byte) string {
			a := new(dns.Msg)
			if err := a.Unpack(b); err != nil {
				return fmt.Sprintf("(%v) %x", err, b)
			}
			return fmt.Sprintf("%v\n%x", a, b)
		}
		tb.Fatalf("query\n%v\nfrom %v: packed answer (written with Write: %v)\n%s\nWriteMsg answer\n%s", m, addr, fast.packed, show(fast.last), show(slow.last))
	}
	return fast.last, fast.packed
}

// addrs returns the sorted A/AAAA/other rdata of the answer section.
func addrs(m *dns.Msg) string {
	var out []string
	for _, rr := range m.Answer {
		switch v := rr.(type) {
		case *dns.A:
			out = append(out, v.A.String())
		case *dns.AAAA:
			out = append(out, v.AAAA.String())
		case *dns.CNAME:
			out = append(out, "CNAME:"+v.Target)
		default:
			out = append(out, strings.TrimPrefix(rr.String(), rr.Header().String()))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// count asks n times and counts the answers by addrs.
func count(tb testing.TB, rp *RoutingPolicy, name string, client string, n int) map[string]int {
	tb.Helper()
	out := map[string]int{}
	for range n {
		out[addrs(ask(tb, rp, name, dns.TypeA, client))]++
	}
	return out
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func newRequest(name string) reqState {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	return reqState{W: &test.ResponseWriter{}, Req: m}
}

type reqState = request.Request

func mustLocator(tb testing.TB) *region.Locator {
	tb.Helper()
	var c region.Config
	l, err := c.Build()
	if err != nil {
		tb.Fatal(err)
	}
	return l
}
