package outbound

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/metadata"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
)

// twoPaths is an outbound block with endpoints eu (first for the server's region) and us
// towards the resolver at addr.
func twoPaths(addr, extra string) string {
	return "outbound example. {\nto " + addr + "\nprivate 127.0.0.0/8\nendpoint eu europe-west1 127.0.0.11\nendpoint us us-east1 127.0.0.12\nregion europe-west1\n" + extra + "\n}"
}

// serveMeta serves m through o and returns the reply and the endpoint that answered.
func serveMeta(t *testing.T, o *Outbound, name string) (*dns.Msg, string) {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	ctx := metadata.ContextWithMetadata(context.Background())
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	o.ServeDNS(ctx, rec, m)
	ep := ""
	if f := metadata.ValueFunc(ctx, "outbound/endpoint"); f != nil {
		ep = f()
	}
	return rec.Msg, ep
}

// O-6 (issue 13, problem 1): a slow answer is hedged, not abandoned. Both endpoints reach a
// resolver that answers in 800 ms. The first attempt's time (500 ms) runs out first: the second
// endpoint is tried while the first keeps listening, the first's answer wins at 800 ms, and is a
// success with its latency for the leader, not a failure.
func TestSlowAnswerHedged(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	const slow = 800 * time.Millisecond
	r.setDelay(slow)
	o := newHandler(t, twoPaths(r.addr, "timeout 3s"))
	start := time.Now()
	m, ep := serveMeta(t, o, "slow.example.")
	took := time.Since(start)
	if m == nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Fatalf("O-6: %v", m)
	}
	if ep != "eu" {
		t.Errorf("O-6: the answer came through %s; the first attempt (eu) was abandoned", ep)
	}
	if took >= slow+attemptMin {
		t.Errorf("O-6: the client waited %v, as long as a retry after the first attempt's time", took)
	}
	eu := o.rk.pairs[0]
	if _, lat, _, consec, _ := eu.stats(time.Now()); consec != 0 || lat < slow.Seconds()*0.9 {
		t.Errorf("O-6: the late answer was recorded as %d failures and latency %.3fs, want a success of ~%v", consec, lat, slow)
	}
	if n := r.queries.Load(); n != 2 {
		t.Errorf("the resolver got %d queries, want 2 (the first attempt and the hedge)", n)
	}
}

// O-6: with no answer through the first pair, the hedge's answer wins and the silent path is
// charged a failure (it was past its time), so the next query does not wait on it.
func TestSilentPathFailsOverAndIsDemoted(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	o := newHandler(t, twoPaths(r.addr, "timeout 3s"))
	r.drop(netip.MustParseAddr("127.0.0.11"))
	if m, ep := serveMeta(t, o, "d.example."); m.Rcode != dns.RcodeSuccess || ep != "us" {
		t.Fatalf("O-6: %s through %q", dns.RcodeToString[m.Rcode], ep)
	}
	if _, _, _, consec, _ := o.rk.pairs[0].stats(time.Now()); consec != 1 {
		t.Fatalf("O-6: the silent path has %d failures, want 1", consec)
	}
	start := time.Now()
	if _, ep := serveMeta(t, o, "after.example."); ep != "us" || time.Since(start) >= attemptMin {
		t.Errorf("O-6: after the failure the query went through %q in %v", ep, time.Since(start))
	}
}

// O-5 (issue 13, problem 7): a name the resolver refuses is answered REFUSED as received, asked
// once per client query (not through every endpoint), and does not demote the path, which keeps
// answering other names.
func TestErrorRcodeNeitherDemotesNorFansOut(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	r.refuseNames("broken.")
	o := newHandler(t, twoPaths(r.addr, ""))
	for i := range 6 {
		name := fmt.Sprintf("broken.%d.example.", i)
		if m, _ := serveMeta(t, o, name); m.Rcode != dns.RcodeRefused {
			t.Fatalf("O-10: %s: %s, want the resolver's REFUSED", name, dns.RcodeToString[m.Rcode])
		}
		if n := r.asked(name); n != 1 {
			t.Errorf("%s asked %d times, want once", name, n)
		}
	}
	if _, _, _, consec, _ := o.rk.pairs[0].stats(time.Now()); consec != 0 || o.rk.pairs[0].isDown() {
		t.Errorf("O-5: one name's REFUSED counted %d failures against eu", consec)
	}
	if m, ep := serveMeta(t, o, "good.example."); m.Rcode != dns.RcodeSuccess || ep != "eu" {
		t.Errorf("O-5: a good name went through %q (%s), want eu", ep, dns.RcodeToString[m.Rcode])
	}
}

// O-5: a path the resolver refuses everything from (an ACL on the endpoint's source) is found by
// the probes its REFUSED replies trigger (the fixed probe question must be answered), and demoted.
func TestRefusingPathDemotedByProbes(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	r.refuseSource(netip.MustParseAddr("127.0.0.11"))
	o := newHandler(t, twoPaths(r.addr, ""))
	clk := &fakeClock{t: time.Now()}
	o.now = clk.now
	if m, ep := serveMeta(t, o, "a.example."); m.Rcode != dns.RcodeRefused || ep != "eu" {
		t.Fatalf("first query: %s through %q", dns.RcodeToString[m.Rcode], ep)
	}
	for range demoteAfter {
		exploreRound(o)
		clk.advance(2 * exploreEvery) // the next period
	}
	if m, ep := serveMeta(t, o, "b.example."); m.Rcode != dns.RcodeSuccess || ep != "us" {
		t.Errorf("O-5: after its probes were refused the query went through %q (%s), want us", ep, dns.RcodeToString[m.Rcode])
	}
}

// O-10: after an error rcode one more pair is tried, towards another target: another resolver may
// answer; the first error reply is what the client gets when none does.
func TestErrorRcodeTriesAnotherTargetOnce(t *testing.T) {
	r1 := startResolver(t, "127.0.0.31")
	r2 := startResolverPort(t, "127.0.0.32", r1.port())
	r3 := startResolverPort(t, "127.0.0.33", r1.port())
	r1.setMode(modeServfailEDE)
	o := newHandler(t, "outbound example. {\nto "+r1.addr+" "+r2.addr+" "+r3.addr+"\nprivate 127.0.0.0/8\n}")
	if m, _ := serveMeta(t, o, "x.example."); m.Rcode != dns.RcodeSuccess {
		t.Errorf("another resolver did not answer after the first one's SERVFAIL: %s", dns.RcodeToString[m.Rcode])
	}
	r2.setMode(modeServfailEDE)
	r3.setMode(modeServfailEDE)
	m, _ := serveMeta(t, o, "y.example.")
	if e := edeOf(m); m.Rcode != dns.RcodeServerFailure || e == nil || e.InfoCode != dns.ExtendedErrorCodeDNSBogus {
		t.Errorf("want a resolver's SERVFAIL with EDE 6, got %v", m)
	}
	if n := r1.asked("y.example.") + r2.asked("y.example.") + r3.asked("y.example."); n != 2 {
		t.Errorf("%d resolvers asked after SERVFAIL, want 2", n)
	}
}

// O-6: answers that arrive just as the attempt's time runs out race with the hedge and its
// cancellation. Every query is answered, and no socket closed by a cancellation goes back to the
// pool: a second round through the same pools is answered too.
func TestHedgingRaces(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	r.slowDown(netip.MustParseAddr("127.0.0.11"), attemptMin)
	o := newHandler(t, twoPaths(r.addr, "timeout 3s"))
	for round := range 2 {
		var wg sync.WaitGroup
		errs := make(chan string, 40)
		for i := range 40 {
			wg.Go(func() {
				name := fmt.Sprintf("r%d-%d.example.", round, i)
				if m, _ := serveMeta(t, o, name); m == nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
					errs <- fmt.Sprintf("%s: %v", name, m)
				}
			})
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Errorf("round %d: %s", round, e)
		}
		for _, p := range o.rk.pairs {
			p.mu.Lock()
			p.consec, p.tot, p.succ, p.lat = 0, 0, 0, 0 // both paths in the race again
			p.mu.Unlock()
		}
		failGen.Add(1)
	}
}

// O-6, O-10: a resolver's error reply (SERVFAIL, REFUSED) is the answer as soon as the attempts
// still listening go only to resolvers that already gave one and no other pair may be tried: the
// same resolver would say the same about the name. Here the resolver answers SERVFAIL + EDE at 1 s
// through eu (its own recursion timed out: common) while the hedge through us, sent at 500 ms on a
// cut path to the same resolver, is silent: the client gets the resolver's reply within 2 s, as
// through forward (at 1 s). Was: the query waited on that hedge until the 4 s deadline.
func TestO10ErrorReplyNotHeldByHedgeToSameResolver(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	r.setMode(modeServfailEDE)
	r.slowDown(netip.MustParseAddr("127.0.0.11"), time.Second)
	r.drop(netip.MustParseAddr("127.0.0.12"))
	o := newHandler(t, twoPaths(r.addr, "timeout 4s"))
	m := new(dns.Msg)
	m.SetQuestion("broken.example.", dns.TypeA)
	m.SetEdns0(1232, false)
	start := time.Now()
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	o.ServeDNS(context.Background(), rec, m)
	took := time.Since(start)
	if rec.Msg == nil || rec.Msg.Rcode != dns.RcodeServerFailure || edeOf(rec.Msg) == nil || edeOf(rec.Msg).InfoCode != dns.ExtendedErrorCodeDNSBogus {
		t.Fatalf("want the resolver's SERVFAIL + EDE 6, got %v", rec.Msg)
	}
	if took > 2*time.Second {
		t.Errorf("O-10: the resolver's SERVFAIL came at ~1 s, the client got it after %v (waiting on a hedge to the same resolver)", took)
	}
}

// O-6: when an attempt's time runs out without a reply, its endpoint is suspect when the next pair
// is chosen, so the hedge goes through the next endpoint. Two endpoints, two resolvers, the eu path
// cut (eu's source is dropped by both): the hedge after eu's first timeout goes through us, which
// answers in less than two attempt times (1 s). Was: the hedge went to eu's other pair, cut too,
// and us was reached only at the second hedge.
func TestO6HedgeAfterTimeoutPrefersAnotherEndpoint(t *testing.T) {
	r1 := startResolver(t, "127.0.0.31")
	r2 := startResolverPort(t, "127.0.0.32", r1.port())
	for _, r := range []*resolver{r1, r2} {
		r.drop(netip.MustParseAddr("127.0.0.11"))
	}
	o := newHandler(t, "outbound example. {\nto "+r1.addr+" "+r2.addr+"\nprivate 127.0.0.0/8\nendpoint eu europe-west1 127.0.0.11\nendpoint us us-east1 127.0.0.12\nregion europe-west1\ntimeout 3s\n}")
	start := time.Now()
	m, ep := serveMeta(t, o, "cut.example.")
	took := time.Since(start)
	if m.Rcode != dns.RcodeSuccess || ep != "us" {
		t.Fatalf("%s through %q", dns.RcodeToString[m.Rcode], ep)
	}
	if took >= 2*attemptMin {
		t.Errorf("O-6: the eu path was cut; the answer through us took %v (two attempt times; one is 500 ms): the hedge went through eu to the other resolver first", took)
	}
}

// O-6: once the client's context is done, no other pair is tried, as forward stops trying
// upstreams (ctx.Err() in its loop). The resolver is silent and the client goes away after 50 ms:
// the query is sent once (no hedge when the first attempt's 500 ms are up) and ServeDNS returns
// within a second, not at the 3 s deadline. Was: the query went on to the hedge and the handler
// ran until the deadline.
func TestO6CancelledContextStops(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	r.setMode(modeSilent)
	o := newHandler(t, twoPaths(r.addr, "timeout 3s"))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	m := new(dns.Msg)
	m.SetQuestion("gone.example.", dns.TypeA)
	start := time.Now()
	o.ServeDNS(ctx, dnstest.NewRecorder(&test.ResponseWriter{}), m)
	took := time.Since(start)
	if n := r.asked("gone.example."); n > 1 || took > time.Second {
		t.Errorf("after the context was cancelled: %d queries sent, handler returned after %v", n, took)
	}
}
