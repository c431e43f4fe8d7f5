package outbound

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
)

// storeHas reports whether the ranking state store holds a pair that match selects.
func storeHas(match func(outcomeKey) bool) bool {
	store.mu.Lock()
	defer store.mu.Unlock()
	for k := range store.m {
		if match(k) {
			return true
		}
	}
	return false
}

// fqdnHandler is an outbound block whose FQDN target resolves to *addr (a fake lookup, TTL 10 s),
// on a fake clock that queries in flight may read while the test advances it.
func fqdnHandler(t *testing.T, port string, addr *atomic.Value) (*Outbound, *syncClock) {
	t.Helper()
	o := newHandler(t, "outbound example. {\nto resolvers.corp:"+port+"\nprivate 127.0.0.0/8\nregion europe-west1\n}")
	clk := &syncClock{}
	clk.ns.Store(time.Unix(1e9, 0).UnixNano())
	o.now = clk.now
	o.lookup = func(_ context.Context, _ request.Request, name string) (*dns.Msg, error) {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 10}, A: net.ParseIP(addr.Load().(string))}}
		return m, nil
	}
	return o, clk
}

// H-6 (issue 13, problem 6): when an FQDN target resolves to a new address, the old address's pair
// goes, with its ranking state and metric series, instead of living until a reload: the endpoint
// holds the new address's pair only.
func TestFQDNPairsPrunedH6(t *testing.T) {
	r1 := startResolver(t, "127.0.0.31")
	startResolverPort(t, "127.0.0.32", r1.port())
	var addr atomic.Value
	addr.Store("127.0.0.31")
	o, clk := fqdnHandler(t, r1.port(), &addr)
	serveMeta(t, o, "x.example.")
	old := "127.0.0.31:" + r1.port()
	if seriesCount(t, map[string]string{"target": old}) == 0 {
		t.Fatal("no series for the first address")
	}
	addr.Store("127.0.0.32")
	clk.advance(11 * time.Second)
	serveMeta(t, o, "x.example.")
	e := o.endpoints[0]
	e.mu.Lock()
	pairs := len(e.pairs)
	e.mu.Unlock()
	if pairs != 1 {
		t.Errorf("the endpoint holds %d pairs, want the new address's only", pairs)
	}
	if storeHas(func(k outcomeKey) bool { return k.dst.String() == old }) {
		t.Errorf("the ranking state of %s outlives its last ranker", old)
	}
	if n := seriesCount(t, map[string]string{"target": old}); n != 0 {
		t.Errorf("%d metric series of %s are still exported", n, old)
	}
}

// DESIGN.md section 7, Observability, which has no numbered rule ("the rank of every endpoint"
// can be seen; issue 13, problem 6): rank and up are exported for an FQDN target's pairs, for the
// region the target was resolved for.
func TestFQDNRankMetrics(t *testing.T) {
	r := startResolver(t, "127.0.0.31")
	var addr atomic.Value
	addr.Store("127.0.0.31")
	o, _ := fqdnHandler(t, r.port(), &addr)
	serveMeta(t, o, "x.example.")
	exploreRound(o)
	l := map[string]string{"zone": "example.", "target": "127.0.0.31:" + r.port(), "endpoint": "default"}
	if v := coretest.Sum(t, "coredns_outbound_rank", map[string]string{"zone": "example.", "region": "europe-west1", "target": l["target"]}); v != 1 {
		t.Errorf("rank of the FQDN target's pair = %v, want 1", v)
	}
	if v := coretest.Sum(t, "coredns_outbound_up", l); v != 1 {
		t.Errorf("up of the FQDN target's pair = %v, want 1", v)
	}
}

// H-6 (issue 13, problem 6): the series of an endpoint a reload removes go with it, and those of
// the endpoint it keeps stay. DESIGN.md section 7 (no numbered rule): rank, up and requests_total
// carry the server label.
func TestRemovedEndpointSeriesDeletedH6(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	corefile := func(endpoints string) string {
		return `series.example.:0 {
	bind 127.0.0.1
	outbound {
		to ` + r.addr + `
		private 127.0.0.0/8
		region europe-west1
		` + endpoints + `
	}
}`
	}
	s := coretest.Start(t, corefile("endpoint s-eu europe-west1 127.0.0.11\nendpoint s-us us-east1 127.0.0.12"))
	mustQuery(t, s, "127.0.0.1", "a.series.example.")
	gone := map[string]string{"endpoint": "s-us"}
	deadline := time.Now().Add(5 * time.Second)
	for coretest.Sum(t, "coredns_outbound_rank", gone) == 0 { // published every second
		if time.Now().After(deadline) {
			t.Fatal("no rank for s-us")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, name := range []string{"coredns_outbound_rank", "coredns_outbound_up", "coredns_outbound_requests_total"} {
		if coretest.Sum(t, name, map[string]string{"server": "dns://127.0.0.1:0", "zone": "series.example."}) == 0 {
			t.Errorf("%s has no series with the server label", name)
		}
	}
	if err := s.Reload(corefile("endpoint s-eu europe-west1 127.0.0.11")); err != nil {
		t.Fatal(err)
	}
	if n := seriesCount(t, gone); n != 0 {
		t.Errorf("%d series of the removed endpoint s-us are still exported", n)
	}
	if n := seriesCount(t, map[string]string{"endpoint": "s-eu"}); n == 0 {
		t.Errorf("the kept endpoint's series went too")
	}
}

// H-6 (issue 13, problem 6): a reload that fails after outbound's startup gives back what that
// startup took, through plugin/pkg/lifecycle like everything else: the pairs of the endpoint it
// added leave no ranking state and no metric series; the old Corefile keeps serving.
func TestFailedReloadGivesBackPairsH6(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	// The port the new Corefile wants is taken (UDP), so its startup fails after outbound's.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	_, port, _ := net.SplitHostPort(pc.LocalAddr().String())
	block := `failed.example.:0 {
	bind 127.0.0.1
	outbound {
		to ` + r.addr + `
		private 127.0.0.0/8
		endpoint f-keep europe-west1 127.0.0.11
		EXTRA
	}
}
`
	s := coretest.Start(t, strings.Replace(block, "EXTRA", "", 1))
	mustQuery(t, s, "127.0.0.1", "a.failed.example.")
	next := strings.Replace(block, "EXTRA", "endpoint f-fresh us-east1 127.0.0.12", 1) + "other.example.:" + port + " {\n\tbind 127.0.0.1\n\twhoami\n}\n"
	if err := s.Reload(next); err == nil {
		t.Fatal("a Corefile whose port is taken was accepted")
	}
	if storeHas(func(k outcomeKey) bool { return k.endpoint == "f-fresh" }) {
		t.Errorf("the failed reload's pairs still hold ranking state")
	}
	if n := seriesCount(t, map[string]string{"endpoint": "f-fresh"}); n != 0 {
		t.Errorf("the failed reload left %d series", n)
	}
	if m := mustQuery(t, s, "127.0.0.1", "b.failed.example."); m.Rcode != dns.RcodeSuccess {
		t.Errorf("the old Corefile stopped serving: %s", dns.RcodeToString[m.Rcode])
	}
}

// H-6 (issue 13, problem 6): when an FQDN target's address changes, the old pair goes with its
// series (TestFQDNPairsPrunedH6), and a query still in flight through it does not bring them back:
// the query holds the old ranker, so what it records when its answer comes goes with the last
// release. Was: its outcome re-created requests_total{target=old} after the prune, and nothing held
// or deleted that series any more.
func TestH6InflightQueryAfterFQDNPrune(t *testing.T) {
	r1 := startResolver(t, "127.0.0.31")
	r1.setDelay(300 * time.Millisecond)
	startResolverPort(t, "127.0.0.32", r1.port())
	var addr atomic.Value
	addr.Store("127.0.0.31")
	o, clk := fqdnHandler(t, r1.port(), &addr)
	old := "127.0.0.31:" + r1.port()

	done := make(chan *dns.Msg)
	go func() {
		m := new(dns.Msg)
		m.SetQuestion("inflight.example.", dns.TypeA)
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		o.ServeDNS(context.Background(), rec, m)
		done <- rec.Msg
	}()
	deadline := time.Now().Add(5 * time.Second)
	for r1.asked("inflight.example.") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first query never reached the resolver")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The target now resolves elsewhere: the next query prunes the old pair and its series.
	addr.Store("127.0.0.32")
	clk.advance(11 * time.Second)
	serveMeta(t, o, "next.example.")
	if n := seriesCount(t, map[string]string{"target": old}); n != 0 {
		t.Fatalf("precondition: %d series of %s right after the prune", n, old)
	}
	if m := <-done; m == nil || m.Rcode != dns.RcodeSuccess {
		t.Fatalf("the in-flight query: %v", m)
	}
	if n := seriesCount(t, map[string]string{"target": old}); n != 0 {
		t.Errorf("H-6: %d series of the pruned pair %s came back after the in-flight query finished; nothing will delete them", n, old)
	}
}

// H-6 (issue 13, problem 6): an FQDN entry whose TTL expired and that no client of its region asked
// again is released at the next probe round: its address, which the name may no longer have, gets
// no probe and has no series exported. Was: the entry kept its pairs, probed every round, with
// their rank and up series exported for good.
func TestH6ExpiredFQDNEntryReleased(t *testing.T) {
	r := startResolver(t, "127.0.0.31")
	var addr atomic.Value
	addr.Store("127.0.0.31")
	o, clk := fqdnHandler(t, r.port(), &addr)
	serveMeta(t, o, "x.example.")
	clk.advance(time.Hour) // far past the 10 s TTL; no query since
	before := r.queries.Load()
	exploreRound(o)
	if n := r.queries.Load() - before; n != 0 {
		t.Errorf("a round an hour after the entry expired sent %d probes to its address", n)
	}
	if n := seriesCount(t, map[string]string{"target": "127.0.0.31:" + r.port()}); n != 0 {
		t.Errorf("%d series of an expired FQDN address are exported", n)
	}
}

// H-6: a query that resolves the FQDN target after the block stopped (a cold lookup finishing
// after a reload's shutdown) is answered through the entry it built, and the entry is not
// installed: nothing would release it.
func TestH6NoFQDNEntryAfterStop(t *testing.T) {
	r := startResolver(t, "127.0.0.31")
	var addr atomic.Value
	addr.Store("127.0.0.31")
	o, _ := fqdnHandler(t, r.port(), &addr)
	o.stop()
	if m, _ := serveMeta(t, o, "late.example."); m == nil || m.Rcode != dns.RcodeSuccess {
		t.Fatalf("the query after stop: %v", m)
	}
	for i := range o.fq.slots {
		if o.fq.slots[i].Load() != nil {
			t.Errorf("H-6: an FQDN entry was installed after stop")
		}
	}
	e := o.endpoints[0]
	e.mu.Lock()
	pairs := len(e.pairs)
	e.mu.Unlock()
	if pairs != 0 {
		t.Errorf("H-6: %d pairs held after stop", pairs)
	}
	if n := seriesCount(t, map[string]string{"target": "127.0.0.31:" + r.port()}); n != 0 {
		t.Errorf("H-6: %d series of the FQDN's address after stop", n)
	}
}
