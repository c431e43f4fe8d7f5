package routingpolicy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/statusview"

	"github.com/miekg/dns"
)

const explainBlock = `routingpolicy example.org {
	public
	region us-east1
	subnet europe-west1 10.2.0.0/16
	subnet asia-northeast1 10.3.0.0/16
	wrr www A 60 "60=10.0.0.1;30=10.0.0.2,10.0.0.3;10=10.0.0.4;0=10.0.0.5" healthcheck web
	geo app A 60 "us-east1=10.1.0.1,10.1.0.2;europe-west1=10.2.0.1;asia-northeast1=10.3.0.1" healthcheck web
	geo fenced A 60 "us-east1=10.1.0.1;europe-west1=10.2.0.1" fence healthcheck web
	failover fo A 60 "10.9.0.1,10.9.0.2" "us-east1=10.1.0.1;europe-west1=10.2.0.1" trickle 0.2 healthcheck web
}`

// agree checks that what Explain says about q is what ServeDNS answers for the same query and
// state (S-2): every answer ServeDNS gives is one of the explained outcomes, each outcome comes
// up as often as its probability says, the rcode and the ECS scope are the explained ones. With
// n answers, an outcome of probability p is expected n*p times with a standard deviation of
// sqrt(n*p*(1-p)); the bound of 6 deviations is passed by a correct implementation less than
// once in 10^8 runs per outcome.
func agree(t *testing.T, rp *RoutingPolicy, q statusview.Question, n int) *statusview.SetExplain {
	t.Helper()
	x := rp.Explain(q)
	if x == nil || x.Answer == nil || len(x.Answer.Sets) != 1 {
		t.Fatalf("explain %s: %+v, want one record set", q.Name, x)
	}
	set := &x.Answer.Sets[0]
	var total float64
	want := map[string]float64{}
	for _, o := range set.Outcomes {
		total += o.Probability
		want[outcomeKey(o.Addresses, o.Scope)] += o.Probability
	}
	if math.Abs(total-1) > 1e-9 {
		t.Fatalf("explain %s: probabilities add up to %v, want 1: %+v", q.Name, total, set.Outcomes)
	}
	got := map[string]int{}
	for range n {
		m, _ := statusview.Query(q)
		r := askMsg(t, rp, m, q.Client.String())
		if dns.RcodeToString[r.Rcode] != x.Answer.Rcode {
			t.Fatalf("%s: ServeDNS rcode %s, explained %s", q.Name, dns.RcodeToString[r.Rcode], x.Answer.Rcode)
		}
		scope := scopeOf(r)
		if scope >= 0 && scope != x.Answer.Scope {
			t.Fatalf("%s: ServeDNS ECS scope %d, explained %d", q.Name, scope, x.Answer.Scope)
		}
		// L-1: the scope is that of the draw (outcome) the answer came from.
		a := addrs(r) + "|" + strconv.Itoa(scope)
		if _, ok := want[a]; !ok {
			t.Fatalf("%s: ServeDNS answered %q, not an explained outcome: %+v", q.Name, a, set.Outcomes)
		}
		got[a]++
	}
	for a, p := range want {
		mean := float64(n) * p
		sd := math.Sqrt(float64(n) * p * (1 - p))
		if d := math.Abs(float64(got[a]) - mean); d > 6*sd+1e-9 {
			t.Errorf("%s: %q answered %d times of %d, explained probability %.4f (expected %.0f ± %.0f)", q.Name, a, got[a], n, p, mean, 6*sd)
		}
	}
	return set
}

// scopeOf is the ECS scope prefix of r, -1 without an ECS option.
func scopeOf(r *dns.Msg) int {
	if o := r.IsEdns0(); o != nil {
		for _, e := range o.Option {
			if s, ok := e.(*dns.EDNS0_SUBNET); ok {
				return int(s.SourceScope)
			}
		}
	}
	return -1
}

// outcomeKey is an answer's addresses and ECS scope, as agree counts them.
func outcomeKey(addrs []string, scope int) string {
	return strings.Join(addrs, ",") + "|" + strconv.Itoa(scope)
}

func question(name, client, ecs string) statusview.Question {
	q := statusview.Question{Name: dns.Fqdn(name), Type: dns.TypeA, Client: netip.MustParseAddr(client)}
	if ecs != "" {
		q.ECS = netip.MustParsePrefix(ecs)
	}
	return q
}

// S-2, R-WRR-2..7: the explained probabilities of a WRR record set are the shares ServeDNS serves,
// as the health of the buckets changes.
func TestExplainEqualsServeDNSWRR(t *testing.T) {
	rp, b := newTest(t, explainBlock)
	q := question("www.example.org", "10.9.9.9", "")
	steps := []struct {
		name  string
		state map[string]health.State
		want  map[string]float64 // outcome addresses -> probability
	}{
		{"all healthy (R-WRR-2)", nil, map[string]float64{"10.0.0.1": .6, "10.0.0.2,10.0.0.3": .3, "10.0.0.4": .1}},
		{"one address of a bucket down (R-WRR-4)", map[string]health.State{"10.0.0.2": health.Unhealthy},
			map[string]float64{"10.0.0.1": .6, "10.0.0.3": .3, "10.0.0.4": .1}},
		{"a bucket down (R-WRR-4)", map[string]health.State{"10.0.0.1": health.Unhealthy},
			map[string]float64{"10.0.0.3": .75, "10.0.0.4": .25}},
		{"every weighted bucket down (R-WRR-5)", map[string]health.State{"10.0.0.1": health.Unhealthy, "10.0.0.3": health.Unhealthy, "10.0.0.4": health.Unhealthy},
			map[string]float64{"10.0.0.5": 1}},
		{"everything down (R-WRR-6, R-WRR-7)", map[string]health.State{"10.0.0.5": health.Unhealthy},
			map[string]float64{"10.0.0.1": .6, "10.0.0.2,10.0.0.3": .3, "10.0.0.4": .1}},
	}
	for _, ip := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"} {
		set(b, "web", ip, health.Healthy)
	}
	for _, s := range steps {
		for ip, st := range s.state {
			set(b, "web", ip, st)
		}
		got := agree(t, rp, q, 20000)
		m := map[string]float64{}
		for _, o := range got.Outcomes {
			m[strings.Join(o.Addresses, ",")] += o.Probability
		}
		if len(m) != len(s.want) {
			t.Fatalf("%s: outcomes %v, want %v", s.name, m, s.want)
		}
		for a, p := range s.want {
			if math.Abs(m[a]-p) > 1e-9 {
				t.Fatalf("%s: P(%s) = %v, want %v", s.name, a, m[a], p)
			}
		}
	}
}

// S-2, R-GEO-1..4, L-1, L-2: geo answers and the way the region was found, by client address and by
// ECS on a public zone (the scope is the explained one).
func TestExplainEqualsServeDNSGeo(t *testing.T) {
	rp, b := newTest(t, explainBlock)
	for _, ip := range []string{"10.1.0.1", "10.1.0.2", "10.2.0.1", "10.3.0.1"} {
		set(b, "web", ip, health.Healthy)
	}
	cases := []struct {
		q              statusview.Question
		region, subnet string
		want           string
	}{
		{question("app.example.org", "10.2.3.4", ""), "europe-west1", "10.2.0.0/16", "10.2.0.1"},
		{question("app.example.org", "192.0.2.1", ""), "us-east1", "", "10.1.0.1,10.1.0.2"},
		// L-1: ECS on a public zone decides, and the answer carries its scope.
		{question("app.example.org", "10.2.3.4", "10.3.7.0/24"), "asia-northeast1", "10.3.0.0/16", "10.3.0.1"},
	}
	for _, c := range cases {
		x := rp.Explain(c.q)
		if x.Location.Region != c.region || x.Location.Subnet != c.subnet || !x.Location.Used {
			t.Fatalf("%v: location %+v, want region %s subnet %q, used", c.q, x.Location, c.region, c.subnet)
		}
		if c.q.ECS.IsValid() && (x.Answer.Scope != c.q.ECS.Bits() || !strings.Contains(x.Location.How, "Client Subnet")) {
			t.Fatalf("ECS: scope %d, how %q", x.Answer.Scope, x.Location.How)
		}
		set := agree(t, rp, c.q, 50)
		if len(set.Outcomes) != 1 || strings.Join(set.Outcomes[0].Addresses, ",") != c.want {
			t.Fatalf("%v: outcomes %+v, want %s", c.q, set.Outcomes, c.want)
		}
	}
	// R-GEO-4: europe-west1 down: the next nearest location answers, and explain says why.
	set(b, "web", "10.2.0.1", health.Unhealthy)
	s := agree(t, rp, question("app.example.org", "10.2.3.4", ""), 50)
	if !s.Outcomes[0].Fallback || s.Items[0].Eligible || !strings.Contains(s.Items[0].Why, "R-GEO-4") || !strings.Contains(s.Items[0].Why, "unhealthy since") {
		t.Fatalf("fallback: %+v", s)
	}
}

// S-2, R-GEO-5: a fenced location with nothing healthy answers with all its addresses.
func TestExplainEqualsServeDNSFencedGeo(t *testing.T) {
	rp, b := newTest(t, explainBlock)
	set(b, "web", "10.1.0.1", health.Healthy)
	set(b, "web", "10.2.0.1", health.Unhealthy)
	s := agree(t, rp, question("fenced.example.org", "10.2.3.4", ""), 50)
	if len(s.Outcomes) != 1 || s.Outcomes[0].Addresses[0] != "10.2.0.1" || !strings.Contains(s.Items[0].Why, "R-GEO-5") {
		t.Fatalf("fenced: %+v", s)
	}
}

// S-2, R-FO-1..4: the trickle probabilities of a failover, as the primary fails and recovers.
func TestExplainEqualsServeDNSFailover(t *testing.T) {
	rp, b := newTest(t, explainBlock)
	for _, ip := range []string{"10.9.0.1", "10.9.0.2", "10.1.0.1", "10.2.0.1"} {
		set(b, "web", ip, health.Healthy)
	}
	q := question("fo.example.org", "10.2.3.4", "")
	// R-FO-3: 80 % primary, 20 % the backup's location for the client (europe-west1).
	s := agree(t, rp, q, 20000)
	if len(s.Outcomes) != 2 || s.Outcomes[0].Side != "primary" || math.Abs(s.Outcomes[1].Probability-0.2) > 1e-9 || s.Outcomes[1].Addresses[0] != "10.2.0.1" {
		t.Fatalf("trickle: %+v", s.Outcomes)
	}
	// R-FO-2: the primary down: the backup answers every query.
	set(b, "web", "10.9.0.1", health.Unhealthy)
	set(b, "web", "10.9.0.2", health.Unhealthy)
	s = agree(t, rp, q, 200)
	if len(s.Outcomes) != 1 || s.Outcomes[0].Side != "backup" || s.Items[0].Eligible {
		t.Fatalf("primary down: %+v", s)
	}
	// R-FO-4: both down: fail open, the trickle share to the backup's nearest location.
	set(b, "web", "10.1.0.1", health.Unhealthy)
	set(b, "web", "10.2.0.1", health.Unhealthy)
	s = agree(t, rp, q, 20000)
	if len(s.Outcomes) != 2 || !s.Outcomes[0].FailOpen || !s.Outcomes[1].FailOpen {
		t.Fatalf("both down: %+v", s.Outcomes)
	}
}

// S-2: names nobody here answers, names that do not exist, and a private zone's ECS.
func TestExplainOtherNames(t *testing.T) {
	rp, _ := newTest(t, explainBlock)
	if x := rp.Explain(question("www.example.com", "10.9.9.9", "")); x != nil {
		t.Fatalf("a name of another zone: %+v, want nil", x)
	}
	x := rp.Explain(question("nx.example.org", "10.9.9.9", ""))
	if x == nil || x.Answer.Rcode != "NXDOMAIN" || len(x.Answer.Sets) != 0 || x.Answer.Scope != -1 {
		t.Fatalf("NXDOMAIN: %+v", x)
	}
	priv, _ := newTest(t, strings.Replace(explainBlock, "public\n", "", 1))
	x = priv.Explain(question("app.example.org", "10.2.3.4", "10.3.7.0/24"))
	if x.Location.Region != "europe-west1" || x.Answer.Scope != -1 || !strings.Contains(x.Location.How, "private") {
		t.Fatalf("private zone with ECS: %+v %+v", x.Location, x.Answer)
	}
	if !slices.Equal(x.Answer.Sets[0].Outcomes[0].Addresses, []string{"10.2.0.1"}) {
		t.Fatalf("private zone: %+v", x.Answer.Sets[0].Outcomes)
	}
}

// S-2, L-1, R-FO-3: with a trickle, a failover answers a query with a client subnet with an ECS
// scope only on the draws that consult the backup (a draw kept on a healthy primary never locates
// the client). Explain says so per outcome, the same in every call, instead of reporting the scope
// and location of one random draw.
func TestExplainFailoverTrickleScopePerDraw(t *testing.T) {
	rp, b := newTest(t, `routingpolicy example.org {
	public
	region us-east1
	subnet europe-west1 10.2.0.0/16
	failover fo A 60 "10.9.0.1" "us-east1=10.1.0.1;europe-west1=10.2.0.1" trickle 0.5 healthcheck web
}`)
	for _, ip := range []string{"10.9.0.1", "10.1.0.1", "10.2.0.1"} {
		set(b, "web", ip, health.Healthy)
	}
	q := question("fo.example.org", "192.0.2.1", "10.2.3.0/24")
	first := rp.Explain(q)
	for range 100 {
		x := rp.Explain(q)
		if x.Answer.Scope != 24 || !x.Location.Used || !slices.EqualFunc(x.Answer.Sets[0].Outcomes, first.Answer.Sets[0].Outcomes,
			func(a, b statusview.Outcome) bool { return a.Scope == b.Scope && a.Probability == b.Probability }) {
			t.Fatalf("explain of one question in one state differs: scope %d, used %v, outcomes %+v", x.Answer.Scope, x.Location.Used, x.Answer.Sets[0].Outcomes)
		}
	}
	s := agree(t, rp, q, 20000)
	if len(s.Outcomes) != 2 || s.Outcomes[0].Scope != -1 || s.Outcomes[1].Scope != 24 {
		t.Fatalf("outcomes %+v: want the primary draw without a scope, the backup draw with /24", s.Outcomes)
	}
}

// S-2, R-ZONE-2: a name under a zone cut is answered with a referral (no AA, the cut's NS in
// authority); explain says so, instead of looking like NODATA.
func TestExplainReferral(t *testing.T) {
	rp, _ := newTest(t, `routingpolicy example.org {
	record sub NS 3600 ns1.sub
	record ns1.sub A 3600 192.0.2.53
	record www A 60 192.0.2.1
}`)
	m := ask(t, rp, "a.sub.example.org.", dns.TypeA, "192.0.2.9")
	if m.Authoritative || len(m.Ns) == 0 || m.Ns[0].Header().Rrtype != dns.TypeNS {
		t.Fatalf("ServeDNS: not a referral: %v", m)
	}
	ref := rp.Explain(question("a.sub.example.org", "192.0.2.9", "")).Answer
	if !ref.Referral || ref.Authoritative || len(ref.Authority) == 0 || !strings.Contains(ref.Authority[0], "NS\tns1.sub.example.org.") ||
		!strings.Contains(ref.Note, "sub.example.org.") {
		t.Fatalf("explain of a referral: %+v", ref)
	}
	q := question("www.example.org", "192.0.2.9", "")
	q.Type = dns.TypeMX
	nodata := rp.Explain(q).Answer
	if nodata.Referral || !nodata.Authoritative || len(nodata.Authority) != 1 || !strings.Contains(nodata.Authority[0], "SOA") {
		t.Fatalf("explain of NODATA: %+v", nodata)
	}
}

// S-2, R-FO-2, R-GEO-5: with a fenced backup whose client location has nothing healthy, the
// failover answers from the healthy primary, trickle or not (a dead fenced backup counts as
// unhealthy). Explain must not mark that location in, nor say it answers.
func TestExplainFailoverFencedDeadBackup(t *testing.T) {
	rp, b := newTest(t, `routingpolicy example.org {
	region us-east1
	subnet europe-west1 10.2.0.0/16
	failover fo A 60 "10.9.0.1" "us-east1=10.1.0.1;europe-west1=10.2.0.1" trickle 0.2 fence healthcheck web
}`)
	set(b, "web", "10.9.0.1", health.Healthy)
	set(b, "web", "10.1.0.1", health.Healthy)
	set(b, "web", "10.2.0.1", health.Unhealthy)
	s := agree(t, rp, question("fo.example.org", "10.2.3.4", ""), 200)
	if len(s.Outcomes) != 1 || s.Outcomes[0].Side != "primary" {
		t.Fatalf("outcomes %+v: the dead fenced backup never answers", s.Outcomes)
	}
	for _, it := range s.Backup {
		if it.Eligible || strings.Contains(it.Why, "answers with") {
			t.Fatalf("backup item %s: eligible %v, why %q; every outcome is the primary's", it.Label, it.Eligible, it.Why)
		}
	}
	if !strings.Contains(s.Backup[0].Why, "does not answer") || !strings.Contains(s.Backup[1].Why, "fencing never leaves") {
		t.Fatalf("backup: %+v", s.Backup)
	}
}

// S-2, R-FO-4: primary and backup all unhealthy, no trickle: the primary answers fail open, and
// explain says so rather than that the backup answers (R-FO-2).
func TestExplainFailoverFailOpenWhy(t *testing.T) {
	rp, b := newTest(t, `routingpolicy example.org {
	region us-east1
	failover fo A 60 "10.9.0.1" "us-east1=10.1.0.1" healthcheck web
}`)
	for _, ip := range []string{"10.9.0.1", "10.1.0.1"} {
		set(b, "web", ip, health.Unhealthy)
	}
	s := agree(t, rp, question("fo.example.org", "192.0.2.1", ""), 50)
	if len(s.Outcomes) != 1 || s.Outcomes[0].Side != "primary" || !s.Outcomes[0].FailOpen {
		t.Fatalf("outcomes %+v", s.Outcomes)
	}
	if w := s.Items[0].Why; strings.Contains(w, "backup answers") || !strings.Contains(w, "R-FO-4") {
		t.Fatalf("primary item: %q, while the primary answers fail open", w)
	}
}

// S-2: explain against ServeDNS over random health states, clients with and without a client
// subnet, query types, policies of every kind (WRR with a zero weight, geo, fenced geo, failovers
// with trickle, fenced and manual), a CNAME to a policy, a referral and NXDOMAIN: every answer
// ServeDNS gives is an explained outcome with its ECS scope, the rcode and AA bit are the explained
// ones, every outcome's item is marked in, and no backup location is marked in that never answers.
// (Membership only, no frequencies: it cannot fail by chance.)
func TestExplainEqualsServeDNSDifferential(t *testing.T) {
	rp, b := newTest(t, `routingpolicy example.org {
	public
	region us-east1
	subnet europe-west1 10.2.0.0/16
	subnet asia-northeast1 10.3.0.0/16
	wrr w A 60 "60=10.0.0.1;30=10.0.0.2,10.0.0.3;0=10.0.0.5" healthcheck web
	geo g A 60 "us-east1=10.1.0.1,10.1.0.2;europe-west1=10.2.0.1;asia-northeast1=10.3.0.1" healthcheck web
	geo gf A 60 "us-east1=10.1.0.1;europe-west1=10.2.0.1" fence healthcheck web
	failover fo A 60 "10.9.0.1" "us-east1=10.1.0.1;europe-west1=10.2.0.1" trickle 0.3 healthcheck web
	failover fof A 60 "10.9.0.1" "us-east1=10.1.0.1;europe-west1=10.2.0.1" trickle 0.3 fence healthcheck web
	failover fo1 A 60 "10.9.0.1" "us-east1=10.1.0.1;europe-west1=10.2.0.1" trickle 1 healthcheck web
	record c CNAME 60 fo.example.org.
	record sub NS 3600 ns1.sub
	record ns1.sub A 3600 192.0.2.53
}`)
	ips := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.5", "10.1.0.1", "10.1.0.2", "10.2.0.1", "10.3.0.1", "10.9.0.1"}
	names := []string{"w", "g", "gf", "fo", "fof", "fo1", "c", "x.sub", "nx"}
	clients := []struct{ ip, ecs string }{{"192.0.2.1", ""}, {"10.2.3.4", ""}, {"192.0.2.1", "10.2.3.0/24"}, {"10.3.1.1", "10.2.9.0/24"}}
	types := []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeANY, dns.TypeTXT, dns.TypeNS}
	rnd := rand.New(rand.NewPCG(7, 9))
	for step := range 40 {
		for _, ip := range ips {
			s := health.Healthy
			if rnd.IntN(3) == 0 {
				s = health.Unhealthy
			}
			set(b, "web", ip, s)
		}
		for _, n := range names {
			for _, c := range clients {
				for _, qt := range types {
					q := question(n+".example.org", c.ip, c.ecs)
					q.Type = qt
					if msg := disagree(t, rp, q); msg != "" {
						t.Fatalf("step %d, %s %s from %s ecs %q: %s", step, q.Name, dns.TypeToString[qt], c.ip, c.ecs, msg)
					}
				}
			}
		}
	}
}

// disagree asks ServeDNS q 20 times and returns how an answer differs from Explain's, or "".
func disagree(t *testing.T, rp *RoutingPolicy, q statusview.Question) string {
	t.Helper()
	x := rp.Explain(q)
	if x == nil || x.Answer == nil {
		return "no explanation"
	}
	var last *statusview.SetExplain
	if n := len(x.Answer.Sets); n > 0 {
		last = &x.Answer.Sets[n-1]
		for _, o := range last.Outcomes {
			items := last.Items
			if o.Side == "backup" {
				items = last.Backup
			}
			if !o.FailOpen && !slices.ContainsFunc(items, func(it statusview.ItemExplain) bool { return it.Label == o.Item && it.Eligible }) {
				return fmt.Sprintf("outcome %s/%s answers, its item is not marked in: %+v", o.Side, o.Item, items)
			}
		}
		for _, it := range last.Backup {
			if it.Eligible && last.Trickle > 0 && !slices.ContainsFunc(last.Outcomes, func(o statusview.Outcome) bool { return o.Side == "backup" && o.Item == it.Label }) {
				return fmt.Sprintf("backup item %s marked in (%q), in no outcome %+v", it.Label, it.Why, last.Outcomes)
			}
		}
	}
	for range 20 {
		m, _ := statusview.Query(q)
		r := askMsg(t, rp, m, q.Client.String())
		if dns.RcodeToString[r.Rcode] != x.Answer.Rcode || r.Authoritative != x.Answer.Authoritative {
			return fmt.Sprintf("rcode %s AA %v, explained %s AA %v (%s)", dns.RcodeToString[r.Rcode], r.Authoritative, x.Answer.Rcode, x.Answer.Authoritative, x.Answer.Note)
		}
		scope := scopeOf(r)
		if last == nil {
			var recs []string
			for _, rr := range r.Answer {
				recs = append(recs, rr.String())
			}
			if !slices.Equal(recs, x.Answer.Records) || scope != -1 {
				return fmt.Sprintf("records %v scope %d, explained %v", recs, scope, x.Answer.Records)
			}
			continue
		}
		var got []string
		for _, rr := range r.Answer {
			if rr.Header().Rrtype != dns.TypeCNAME {
				got = append(got, rdata(rr))
			}
		}
		slices.Sort(got)
		if !slices.ContainsFunc(last.Outcomes, func(o statusview.Outcome) bool { return slices.Equal(o.Addresses, got) && o.Scope == scope }) {
			return fmt.Sprintf("answer %v with ECS scope %d is no explained outcome %+v", got, scope, last.Outcomes)
		}
	}
	return ""
}
