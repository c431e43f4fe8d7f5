package outbound

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
)

// twoEndpoints is a Corefile with endpoints eu (europe-west1, source 127.0.0.11) and us
// (us-east1, source 127.0.0.12) forwarding example. to the resolver at target. Clients in
// 127.0.1.0/24 are in europe-west1, 127.0.2.0/24 in us-east1, 127.0.3.0/24 in asia-east1.
func twoEndpoints(target, extra string) string {
	return `example.:0 {
	bind 127.0.0.1
	outbound example. {
		to ` + target + `
		private 127.0.0.0/8
		endpoint eu europe-west1 127.0.0.11
		endpoint us us-east1 127.0.0.12
		region europe-west1
		subnet europe-west1 127.0.1.0/24
		subnet us-east1 127.0.2.0/24
		subnet asia-east1 127.0.3.0/24
		` + extra + `
	}
}`
}

// askEDNS asks name A with EDNS0 through s.
func askEDNS(t *testing.T, s *coretest.Server, name string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.SetEdns0(1232, false)
	a, err := s.Exchange(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mustQuery(t *testing.T, s *coretest.Server, from, name string) *dns.Msg {
	t.Helper()
	m, err := s.QueryFrom(from, name, dns.TypeA)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// O-2: a query through an endpoint leaves from its source. O-5: at cold start the endpoint
// nearest the client's region is used. O-7: a region without an endpoint uses the best
// endpoint elsewhere (the nearest, at cold start).
func TestSourcePerEndpointAndColdStart(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	s := coretest.Start(t, twoEndpoints(r.addr, ""))

	// O-7: asia-east1 has no endpoint; at cold start the best elsewhere is the nearest, and
	// Taiwan is nearer Belgium than South Carolina.
	mustQuery(t, s, "127.0.3.1", "asia.example.")
	if n := r.count("127.0.0.11"); n != 1 {
		t.Errorf("O-7: asia client did not go through the nearest endpoint eu (sources %v)", r.sourceSet())
	}
	for i := range 5 {
		m := mustQuery(t, s, "127.0.1.1", fmt.Sprintf("q%d.example.", i))
		if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
			t.Fatalf("answer %v", m)
		}
	}
	if n := r.count("127.0.0.11"); n != 6 {
		t.Errorf("O-2/O-5: eu source 127.0.0.11 sent %d queries, want 6 (sources %v)", n, r.sourceSet())
	}
	for i := range 5 {
		mustQuery(t, s, "127.0.2.1", fmt.Sprintf("u%d.example.", i))
	}
	if n := r.count("127.0.0.12"); n != 5 {
		t.Errorf("O-2/O-5: us source 127.0.0.12 sent %d queries, want 5 (sources %v)", n, r.sourceSet())
	}
	// NXDOMAIN is passed through and is a success.
	m := mustQuery(t, s, "127.0.1.1", "nx.example.")
	if m.Rcode != dns.RcodeNameError {
		t.Errorf("nxdomain: got %s", dns.RcodeToString[m.Rcode])
	}
	// Not our zone.
	m = mustQuery(t, s, "127.0.1.1", "example.org.")
	if m.Rcode != dns.RcodeRefused && m.Rcode != dns.RcodeServerFailure {
		t.Errorf("outside the zone: got %s", dns.RcodeToString[m.Rcode])
	}
}

// O-6: the best endpoint's path dies (the resolver drops its source); the next query fails over
// within its deadline with no client-visible failure, the dead endpoint is demoted, and when it
// recovers exploration finds it and it is preferred again.
func TestFailoverAndRecovery(t *testing.T) {
	defer shortHalfLife(time.Second)()
	r := startResolver(t, "127.0.0.50")
	s := coretest.Start(t, twoEndpoints(r.addr, "timeout 3s"))
	for range 3 {
		mustQuery(t, s, "127.0.1.1", "warm.example.")
	}
	if r.count("127.0.0.11") != 3 {
		t.Fatalf("eu not preferred: %v", r.sourceSet())
	}
	blocked := netip.MustParseAddr("127.0.0.11")
	r.drop(blocked)
	for i := range 10 {
		m := mustQuery(t, s, "127.0.1.1", fmt.Sprintf("f%d.example.", i))
		if m.Rcode != dns.RcodeSuccess {
			t.Fatalf("O-6: query %d after the path died: %s", i, dns.RcodeToString[m.Rcode])
		}
	}
	if n := r.count("127.0.0.12"); n < 10 {
		t.Errorf("O-6: us answered %d of 10 after failover (sources %v)", n, r.sourceSet())
	}
	r.undrop(blocked)
	// us leads now, and a leader keeps its place against a challenger better by less than a
	// band (hysteresis). On loopback both paths answer in well under a millisecond, but on a
	// loaded machine their smoothed latencies wander a band or two apart, either way, for
	// seconds: us is slowed by 30 ms, so what decides is eu's recovery (its failures fade as its
	// probes succeed), not the machine's noise.
	r.slowDown(netip.MustParseAddr("127.0.0.12"), 30*time.Millisecond)
	// Exploration probes every second; poll until eu is preferred again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		before := r.count("127.0.0.11")
		mustQuery(t, s, "127.0.1.1", "back.example.")
		if r.count("127.0.0.11") > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("O-6: eu not preferred again after recovery (sources %v)", r.sourceSet())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// O-10: a fresh random ID per upstream query; TC retried over TCP; mismatched replies dropped
// while the wait goes on; EDNS0 kept with buffer 1232.
func TestWireBehaviour(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	s := coretest.Start(t, twoEndpoints(r.addr, "timeout 1s"))

	m := new(dns.Msg)
	m.SetQuestion("id.example.", dns.TypeA)
	m.Id = 4242
	for range 20 {
		a, err := s.Exchange(m)
		if err != nil {
			t.Fatal(err)
		}
		if a.Id != 4242 {
			t.Fatalf("reply ID %d, want the client's 4242", a.Id)
		}
	}
	r.mu.Lock()
	ids := map[uint16]bool{}
	for _, id := range r.ids {
		ids[id] = true
	}
	r.mu.Unlock()
	if len(ids) < 19 { // 20 random 16-bit IDs collide with probability < 0.003; two collisions < 1e-5
		t.Errorf("O-10: %d distinct upstream IDs for 20 queries", len(ids))
	}
	if ids[4242] && len(ids) == 1 {
		t.Errorf("O-10: client ID reused upstream")
	}

	r.setMode(modeTruncate)
	a := mustQuery(t, s, "127.0.1.1", "tc.example.")
	if a.Truncated || len(a.Answer) != 1 {
		t.Errorf("O-10: TC not retried over TCP: %v", a)
	}

	// EDNS0 kept, buffer 1232 towards the resolver.
	r.setMode(modeAnswer)
	var seen uint16
	r.mu.Lock()
	r.onQuery = func(q *dns.Msg) { // called under r.mu
		if o := q.IsEdns0(); o != nil {
			seen = o.UDPSize()
		}
	}
	r.mu.Unlock()
	m = new(dns.Msg)
	m.SetQuestion("edns.example.", dns.TypeA)
	m.SetEdns0(4096, true)
	if _, err := s.Exchange(m); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	got := seen
	r.mu.Unlock()
	if got != 1232 {
		t.Errorf("O-10: upstream EDNS0 buffer %d, want 1232", got)
	}

	// A resolver that answers with a wrong ID, then a wrong question, then garbage: all dropped,
	// the wait goes on, and the attempt fails (a failure for ranking); the query fails over.
	r.setMode(modeSpoofed)
	a = mustQuery(t, s, "127.0.1.1", "spoofed.example.")
	if a.Rcode != dns.RcodeSuccess || len(a.Answer) != 1 {
		t.Errorf("O-10: the right reply after mismatched ones was not taken: %v", a)
	}
	r.setMode(modeGarbage)
	a = mustQuery(t, s, "127.0.1.1", "garbage.example.")
	if a.Rcode != dns.RcodeServerFailure {
		t.Errorf("O-10: garbage answered %s, want SERVFAIL after every attempt failed", dns.RcodeToString[a.Rcode])
	}
}

// O-10: when no resolver answers, the client gets a synthesized SERVFAIL with an Extended DNS
// Error whose text is generic: endpoint names, addresses and OS errors stay in the log and the
// metrics, never reach clients.
func TestAllFail(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	s := coretest.Start(t, twoEndpoints(r.addr, "timeout 1s"))
	r.setMode(modeSilent)
	a := askEDNS(t, s, "fail.example.")
	if a.Rcode != dns.RcodeServerFailure {
		t.Fatalf("rcode %s", dns.RcodeToString[a.Rcode])
	}
	ede := edeOf(a)
	if ede == nil || ede.InfoCode != dns.ExtendedErrorCodeNetworkError || ede.ExtraText != textNoAnswer {
		t.Fatalf("O-10: want EDE 23 %q, got %v", textNoAnswer, ede)
	}
	for _, internal := range []string{"eu", "us", "127.0.0", r.port(), "timeout", "i/o"} {
		if strings.Contains(ede.ExtraText, internal) {
			t.Errorf("O-10: the EDE text %q names %q", ede.ExtraText, internal)
		}
	}
}

// O-10 (issue 13, problem 4): when the resolver answers with an error, the client gets that reply
// as received, its rcode and Extended DNS Error included, not one synthesized by outbound.
func TestResolverErrorReplyKept(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	s := coretest.Start(t, twoEndpoints(r.addr, ""))
	r.setMode(modeServfailEDE)
	a := askEDNS(t, s, "bogus.example.")
	e := edeOf(a)
	if a.Rcode != dns.RcodeServerFailure || e == nil || e.InfoCode != dns.ExtendedErrorCodeDNSBogus || e.ExtraText != "signature expired" {
		t.Errorf("O-10: the resolver's SERVFAIL with EDE 6 reached the client as %v", a)
	}
}

// shortHalfLife makes outcomes fade fast for tests on the wall clock; call the result to restore.
func shortHalfLife(d time.Duration) func() {
	old := halfLife.Swap(int64(d))
	return func() { halfLife.Store(old) }
}

// O-5 through real traffic: the nearest endpoint's path is 40 ms slower; exploration measures the
// other endpoint, and lower latency then beats shorter distance.
func TestLatencyBeatsDistance(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	r.slowDown(netip.MustParseAddr("127.0.0.11"), 40*time.Millisecond)
	s := coretest.Start(t, twoEndpoints(r.addr, ""))
	mustQuery(t, s, "127.0.1.1", "first.example.")
	if r.count("127.0.0.11") != 1 {
		t.Fatalf("cold start did not pick the nearest (eu): %v", r.sourceSet())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		before := r.count("127.0.0.12")
		mustQuery(t, s, "127.0.1.1", "lat.example.")
		if r.count("127.0.0.12") > before {
			break // us, farther but faster, is now preferred for the eu client
		}
		if time.Now().After(deadline) {
			t.Fatalf("O-5: the 40 ms slower nearest endpoint is still preferred (sources %v)", r.sourceSet())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// And it stays preferred: no flapping back to the slow one.
	before := r.count("127.0.0.11")
	for i := range 20 {
		mustQuery(t, s, "127.0.1.1", fmt.Sprintf("stay%d.example.", i))
	}
	if n := r.count("127.0.0.11") - before; n > 2 {
		t.Errorf("O-5: %d of 20 queries went back to the slow endpoint", n)
	}
}

// Ranking state survives a reload, as health verdicts do (H-4): an endpoint demoted before the
// reload is still demoted after it, so no query waits on its dead path again.
func TestRankingSurvivesReload(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	s := coretest.Start(t, twoEndpoints(r.addr, "timeout 3s"))
	for range 3 {
		mustQuery(t, s, "127.0.1.1", "warm.example.")
	}
	r.drop(netip.MustParseAddr("127.0.0.11"))
	for range 3 {
		mustQuery(t, s, "127.0.1.1", "demote.example.")
	}
	if err := s.Reload(twoEndpoints(r.addr, "timeout 4s")); err != nil {
		t.Fatal(err)
	}
	before := r.count("127.0.0.12")
	start := time.Now()
	m := mustQuery(t, s, "127.0.1.1", "after.example.")
	if m.Rcode != dns.RcodeSuccess || r.count("127.0.0.12") != before+1 {
		t.Fatalf("after reload: %s, sources %v", dns.RcodeToString[m.Rcode], r.sourceSet())
	}
	if d := time.Since(start); d >= attemptMin {
		t.Errorf("after reload the query took %v: it waited on the demoted endpoint again", d)
	}
}
