package outbound

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	"github.com/miekg/dns"
)

// O-8 caching: the FQDN's answer is cached per region for its TTL and refreshed by one query
// after 80 % of the TTL, before it expires; a failed refresh keeps the old addresses.
func TestFQDNCacheAndRefresh(t *testing.T) {
	r := startResolver(t, "127.0.0.31")
	o := newHandler(t, "outbound example. {\nto resolvers.corp:"+r.port()+"\nprivate 127.0.0.0/8\nsubnet europe-west1 10.240.0.0/16\nsubnet us-east1 10.241.0.0/16\n}")
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	o.now = clk.now
	var lookups atomic.Int64
	var fail atomic.Bool
	o.lookup = func(_ context.Context, _ request.Request, name string) (*dns.Msg, error) {
		lookups.Add(1)
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		if fail.Load() {
			m.Rcode = dns.RcodeServerFailure
			return m, nil
		}
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 10}, A: net.ParseIP("127.0.0.31")}}
		return m, nil
	}
	query := func(client string) int {
		m := new(dns.Msg)
		m.SetQuestion("x.example.", dns.TypeA)
		w := &test.ResponseWriter{RemoteIP: client}
		rec := dnstest.NewRecorder(w)
		if _, err := o.ServeDNS(context.Background(), rec, m); err != nil {
			t.Log(err)
		}
		if rec.Msg == nil {
			return -1
		}
		return rec.Msg.Rcode
	}
	if rc := query("10.240.0.1"); rc != dns.RcodeSuccess {
		t.Fatalf("first query: rcode %d", rc)
	}
	query("10.240.0.2")
	if n := lookups.Load(); n != 1 {
		t.Errorf("O-8: %d lookups for two queries from one region, want 1 (cached)", n)
	}
	query("10.241.0.1")
	if n := lookups.Load(); n != 2 {
		t.Errorf("O-8: %d lookups after a query from a second region, want 2 (per region)", n)
	}
	clk.advance(7 * time.Second) // before 80 % of 10 s
	query("10.240.0.1")
	if n := lookups.Load(); n != 2 {
		t.Errorf("O-8: refreshed before 80%% of the TTL (%d lookups)", n)
	}
	clk.advance(2 * time.Second) // 9 s: past 80 %, before expiry
	query("10.240.0.1")
	if n := lookups.Load(); n != 3 {
		t.Errorf("O-8: not refreshed before expiry (%d lookups)", n)
	}
	// A failed refresh keeps the addresses: the query still succeeds.
	fail.Store(true)
	clk.advance(9 * time.Second)
	if rc := query("10.240.0.1"); rc != dns.RcodeSuccess {
		t.Errorf("O-8: failed refresh broke the query: rcode %d", rc)
	}
	if r.queries.Load() < 5 {
		t.Errorf("resolver got %d queries", r.queries.Load())
	}
}

// P-4: a target whose health a pschealth destination (or load-balancer VIP) publishes as
// unhealthy is ranked below every healthy target.
func TestPublishedTargetHealth(t *testing.T) {
	r1 := startResolver(t, "127.0.0.31")
	r2 := startResolverPort(t, "127.0.0.32", r1.port())
	o := newHandler(t, "outbound example. {\nto "+r1.addr+" "+r2.addr+"\nprivate 127.0.0.0/8\n}")
	if len(o.rk.health) != 2 || o.rk.pairs[0].dst.Addr() != netip.MustParseAddr("127.0.0.31") {
		t.Fatalf("health %v", o.rk.health)
	}
	dest := o.rk.health[0]
	o.board.Publish(dest)
	defer o.board.Unpublish(dest)
	o.board.Set(dest, 2 /* Unhealthy */, "test")
	defer o.board.Set(dest, 1, "test")
	failGen.Add(1)
	for range 5 {
		m := new(dns.Msg)
		m.SetQuestion("h.example.", dns.TypeA)
		o.ServeDNS(context.Background(), dnstest.NewRecorder(&test.ResponseWriter{}), m)
	}
	if r1.queries.Load() != 0 || r2.queries.Load() != 5 {
		t.Errorf("P-4: unhealthy destination got %d queries, healthy %d", r1.queries.Load(), r2.queries.Load())
	}
}

// P-4 for FQDN targets: a resolved address whose state a pschealth destination publishes as
// unhealthy is ranked last; the board entries are released at shutdown.
func TestFQDNTargetHealth(t *testing.T) {
	r1 := startResolver(t, "127.0.0.31")
	r2 := startResolverPort(t, "127.0.0.32", r1.port())
	o := newHandler(t, "outbound example. {\nto resolvers.corp:"+r1.port()+"\nprivate 127.0.0.0/8\n}")
	// The board calls its clock when it creates a target (and when a state changes): counting the
	// calls tells whether an Acquire found the target held.
	var clock atomic.Int64
	board := health.NewBoard(func() time.Time { clock.Add(1); return time.Now() })
	o.board = board
	dest := board.Acquire(health.Key{Addr: netip.MustParseAddr("127.0.0.31")})
	board.Publish(dest)
	board.Set(dest, health.Unhealthy, "test")
	o.lookup = func(_ context.Context, _ request.Request, name string) (*dns.Msg, error) {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		for _, a := range []string{"127.0.0.31", "127.0.0.32"} {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP(a)})
		}
		return m, nil
	}
	for range 5 {
		m := new(dns.Msg)
		m.SetQuestion("h.example.", dns.TypeA)
		serve(t, o, m)
	}
	if r1.queries.Load() != 0 || r2.queries.Load() != 5 {
		t.Errorf("P-4: unhealthy resolved target got %d queries, healthy one %d", r1.queries.Load(), r2.queries.Load())
	}
	o.stop()
	before := clock.Load()
	board.Release(board.Acquire(health.Key{Addr: netip.MustParseAddr("127.0.0.32")}))
	if clock.Load() == before {
		t.Errorf("board entry of a resolved target not released at shutdown")
	}
	board.Release(dest)
}
