package routingpolicy

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
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
	rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: client})
	if _, err := rp.ServeDNS(context.Background(), rec, m); err != nil {
		tb.Fatalf("ServeDNS: %v", err)
	}
	if rec.Msg == nil {
		tb.Fatalf("no answer written")
	}
	return rec.Msg
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
