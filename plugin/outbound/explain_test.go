package outbound

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/statusview"

	"github.com/miekg/dns"
)

// handlerOf returns the live outbound handler.
func handlerOf(t *testing.T) *Outbound {
	t.Helper()
	var found *Outbound
	for _, p := range statusview.Default.Live() {
		if o, ok := p.(*Outbound); ok {
			found = o
		}
	}
	if found == nil {
		t.Fatal("no live outbound provider")
	}
	return found
}

// S-2, O-5, O-6, O-7: explain lists the pairs in the order ServeDNS tries them for the client's
// region, before and after the leader's path dies, and says what placed each; it stores no
// ranking (S-3).
func TestExplainRanksAsServeDNS(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	s := coretest.Start(t, twoEndpoints(r.addr, "timeout 3s"))
	o := handlerOf(t)
	eu := statusview.Question{Name: "a.example.", Type: dns.TypeA, Client: netip.MustParseAddr("127.0.1.1")}
	asia := statusview.Question{Name: "a.example.", Type: dns.TypeA, Client: netip.MustParseAddr("127.0.3.1")}

	same := func(q statusview.Question) []statusview.Pair {
		t.Helper()
		xs := statusview.Default.Explain(q)
		if len(xs) != 1 || xs[0].Forward == nil || xs[0].Zone != "example." {
			t.Fatalf("explain %v: %+v, want one outbound explanation", q, xs)
		}
		pairs := xs[0].Forward.Pairs
		from := o.loc.Region(q.Client)
		rank := o.rk.order(from) // what the next query uses
		for i, pos := range rank.order {
			if p := o.rk.pairs[pos]; pairs[i].Endpoint != p.ep.Name || pairs[i].Source != p.srcStr {
				t.Fatalf("explain %v: pair %d is %s/%s, ServeDNS's ranking has %s/%s", q, i, pairs[i].Endpoint, pairs[i].Source, p.ep.Name, p.srcStr)
			}
		}
		if xs[0].Location.Region != o.loc.Table.Name(from) {
			t.Fatalf("explain %v: region %q", q, xs[0].Location.Region)
		}
		return pairs
	}
	// S-3: explaining stores no ranking.
	statusview.Default.Explain(eu)
	if o.rk.byRegion[int(o.loc.Region(eu.Client))+1].Load() != nil {
		t.Fatal("explain stored a ranking")
	}
	// Cold start: the nearest endpoint first; asia has none and uses the nearest elsewhere (O-7).
	if p := same(eu); p[0].Endpoint != "eu" {
		t.Fatalf("cold start: %+v", p)
	}
	xs := statusview.Default.Explain(asia)
	if p := same(asia); p[0].Endpoint != "eu" || !strings.Contains(xs[0].Forward.Note, "O-7") {
		t.Fatalf("asia: %+v %q", p, xs[0].Forward.Note)
	}
	for i := range 3 {
		mustQuery(t, s, "127.0.1.1", fmt.Sprintf("w%d.example.", i))
	}
	r.drop(netip.MustParseAddr("127.0.0.11"))
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		mustQuery(t, s, "127.0.1.1", fmt.Sprintf("f%d.example.", i))
		if p := same(eu); p[0].Endpoint == "us" {
			if !strings.Contains(p[1].Why, "demoted") && !strings.Contains(p[1].Why, "band") {
				t.Fatalf("the dead pair's why: %q", p[1].Why)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the eu pair was never placed below us")
		}
	}
	// A name outside the zone is nobody's here.
	if xs := statusview.Default.Explain(statusview.Question{Name: "example.org.", Type: dns.TypeA, Client: eu.Client}); len(xs) != 0 {
		t.Fatalf("example.org: %+v", xs)
	}
}

// S-2, O-8: an FQDN target is explained once a query from the client's region resolved it; before
// that, explain says it is not resolved yet, and sends nothing itself (S-3).
func TestExplainFQDNTarget(t *testing.T) {
	r1 := startResolver(t, "127.0.0.31")
	s := coretest.Start(t, `.:0 {
	bind 127.0.0.1
	routingpolicy corp. {
		subnet europe-west1 127.0.1.0/24
		geo resolvers A 30 "europe-west1=127.0.0.31"
	}
	outbound example. {
		to resolvers.corp:`+r1.port()+`
		private 127.0.0.0/8
		endpoint eu europe-west1 127.0.0.11
		subnet europe-west1 127.0.1.0/24
	}
}`)
	q := statusview.Question{Name: "a.example.", Type: dns.TypeA, Client: netip.MustParseAddr("127.0.1.1")}
	var fwd *statusview.Forward
	for _, x := range statusview.Default.Explain(q) {
		if x.Plugin == "outbound" {
			fwd = x.Forward
		}
	}
	if fwd == nil || len(fwd.Pairs) != 0 || !strings.Contains(fwd.Note, "not resolved") {
		t.Fatalf("before a query: %+v", fwd)
	}
	if n := r1.queries.Load(); n != 0 {
		t.Fatalf("explain sent %d queries", n)
	}
	mustQuery(t, s, "127.0.1.1", "a.example.")
	for _, x := range statusview.Default.Explain(q) {
		if x.Plugin == "outbound" {
			fwd = x.Forward
		}
	}
	if len(fwd.Pairs) != 1 || fwd.Pairs[0].Endpoint != "eu" || !strings.HasPrefix(fwd.Pairs[0].Target, "127.0.0.31") {
		t.Fatalf("after a query: %+v", fwd)
	}
}
