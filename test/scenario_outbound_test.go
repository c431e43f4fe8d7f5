package test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/region"

	"github.com/miekg/dns"
)

// The outbound scenarios of issue 7 (section 2, items 1 to 5): the deployment patterns of
// reference/outbound-endpoints.es.txt, each through one real CoreDNS server started from a
// Corefile, with resolvers on 127.0.x.y that record the source address of every query. Client
// networks are 127.0.N.0/24 subnets; egress endpoint sources are other 127.x addresses of this
// host (every 127.0.0.0/8 address is local on Linux). Nothing leaves the loopback interface.

// TestScenarioOutboundRegionalResolvers reproduces "Enruta consultas a agentes de resolución
// locales regionales": a geo zone onprem-resolvers.example.com with one on-prem resolver per
// region, an outbound zone whose target is that FQDN, and egress endpoints in two regions. A VM
// in each region has its query resolved for its region (the FQDN through the geo policy) and
// forwarded through its region's endpoint (nearest first, O-5), so each regional resolver sees
// its own region's clients only, from its own region's endpoint source (O-2, O-8, R-GEO-1).
func TestScenarioOutboundRegionalResolvers(t *testing.T) {
	rs := obStartResolvers(t, "127.0.10.1", "127.0.20.1")
	eu, us := rs[0], rs[1]
	port := coretest.FreePort(t)
	s := coretest.Start(t, obCorefile(`example.com:{PORT} {
	bind 127.0.0.1
	routingpolicy {
		subnet europe-west1 127.0.1.0/24
		subnet us-east1 127.0.2.0/24
		geo onprem-resolvers A 30 "europe-west1=127.0.10.1;us-east1=127.0.20.1"
	}
}
corp.internal:{PORT} {
	bind 127.0.0.1
	outbound {
		to onprem-resolvers.example.com:{RPORT}
		private 127.0.0.0/8
		endpoint eu-egress europe-west1 127.0.11.1
		endpoint us-egress us-east1 127.0.21.1
		subnet europe-west1 127.0.1.0/24
		subnet us-east1 127.0.2.0/24
	}
}`, "PORT", port, "RPORT", eu.port()))

	// The geo zone alone: each region gets its own resolver address.
	for from, want := range map[string]string{"127.0.1.10": "127.0.10.1", "127.0.2.10": "127.0.20.1"} {
		obMustA(t, s, from, "onprem-resolvers.example.com.", want)
	}
	// Interleaved, so the per-region FQDN cache is exercised in both directions.
	const n = 5
	for i := range n {
		obMustA(t, s, "127.0.1.10", fmt.Sprintf("eu-%d.corp.internal.", i), eu.answer.String())
		obMustA(t, s, "127.0.2.10", fmt.Sprintf("us-%d.corp.internal.", i), us.answer.String())
		obMustA(t, s, "127.0.1.77", fmt.Sprintf("eu-b%d.corp.internal.", i), eu.answer.String())
	}
	checks := []struct {
		r           *obResolver
		prefix, src string
		want        int
		other       string
	}{
		{eu, "eu-", "127.0.11.1", 2 * n, "us-"},
		{us, "us-", "127.0.21.1", n, "eu-"},
	}
	for _, c := range checks {
		got := c.r.sources(c.prefix)
		if got[c.src] != c.want || len(got) != 1 {
			t.Errorf("resolver %s: %s* queries by source %v, want %d from %s only", c.r.ip, c.prefix, got, c.want, c.src)
		}
		if other := c.r.sources(c.other); len(other) != 0 {
			t.Errorf("resolver %s received the other region's queries %s*: %v", c.r.ip, c.other, other)
		}
	}
}

// TestScenarioOutboundRegionWithoutEndpoint reproduces "Reenvío desde una región sin un extremo
// local en una sola red de VPC": a VM in a region where no endpoint was configured still gets
// its queries forwarded, across regions, through the highest-ranked available endpoint (O-7):
// with no data the nearest one (O-5), and when that one's path is cut, the next one (O-6).
func TestScenarioOutboundRegionWithoutEndpoint(t *testing.T) {
	r := obStartResolvers(t, "127.0.30.1")[0]
	s := coretest.Start(t, obCorefile(`corp.internal:0 {
	bind 127.0.0.1
	outbound {
		to {R}
		private 127.0.0.0/8
		timeout 2s
		endpoint eu-egress europe-west1 127.0.31.1
		endpoint us-egress us-east1 127.0.32.1
		subnet europe-west1 127.0.1.0/24
		subnet us-east1 127.0.2.0/24
		subnet asia-east1 127.0.3.0/24
	}
}`, "R", r.addr))

	// The nearest endpoint to asia-east1, from the same table the plugin uses.
	tab := region.NewTable(nil)
	asia, _ := tab.Lookup("asia-east1")
	euID, _ := tab.Lookup("europe-west1")
	usID, _ := tab.Lookup("us-east1")
	nearest, other := "127.0.31.1", "127.0.32.1"
	if tab.Distance(asia, usID) < tab.Distance(asia, euID) {
		nearest, other = other, nearest
	}

	const asiaClient = "127.0.3.10"
	for i := range 4 {
		obMustA(t, s, asiaClient, fmt.Sprintf("asia-%d.corp.internal.", i), "192.0.2.1")
	}
	if got := r.sources("asia-"); got[nearest] != 4 || len(got) != 1 {
		t.Fatalf("O-7: asia-east1 has no endpoint; its queries by source %v, want all 4 from the nearest endpoint %s", got, nearest)
	}

	// The nearest endpoint's path goes silent: asia's queries still succeed, through the other
	// region's endpoint; at most the attempts before the path is demoted are lost.
	r.silence(nearest)
	for i := range 6 {
		obMustA(t, s, asiaClient, fmt.Sprintf("asiacut-%d.corp.internal.", i), "192.0.2.1")
	}
	dropped := 0
	for _, e := range r.log() {
		if strings.HasPrefix(e.name, "asiacut-") && e.dropped {
			dropped++
		}
	}
	if got := r.sources("asiacut-"); got[other] != 6 || dropped > 2 {
		t.Errorf("O-7/O-6: with %s silent, asia's queries by source %v (%d lost first attempts), want 6 answered through %s and at most 2 lost", nearest, got, dropped, other)
	}
	// The last queries go straight to the next endpoint: the silent path is no longer tried.
	var cutLog []obSeen
	for _, e := range r.log() {
		if strings.HasPrefix(e.name, "asiacut-") {
			cutLog = append(cutLog, e)
		}
	}
	for _, e := range cutLog[len(cutLog)-3:] {
		if e.src.String() != other || e.dropped {
			t.Errorf("O-6: after demotion a query still went to %v (dropped %v): %q", e.src, e.dropped, e.name)
		}
	}
}

// TestScenarioOutboundViewIsolation reproduces "Reenvío desde varias redes de VPC en la misma
// región con aislamiento de IP de origen": two client networks in one region, each with a
// forwarding zone authorized for that network only (a CoreDNS view on the client subnet, one
// port) and using only that network's endpoint. The on-prem resolver sees a distinct source per
// network (O-9), a client of neither network is not served, and when one network's endpoint is
// cut its queries fail rather than leak through the other network's endpoint.
func TestScenarioOutboundViewIsolation(t *testing.T) {
	r := obStartResolvers(t, "127.0.40.1")[0]
	port := coretest.FreePort(t)
	s := coretest.Start(t, obCorefile(`corp.internal:{PORT} {
	bind 127.0.0.1
	view net-a {
		expr incidr(client_ip(), '127.0.1.0/24')
	}
	outbound {
		to {R}
		private 127.0.0.0/8
		timeout 1s
		region europe-west1
		endpoint net-a-egress europe-west1 127.0.41.1
	}
}
corp.internal:{PORT} {
	bind 127.0.0.1
	view net-b {
		expr incidr(client_ip(), '127.0.2.0/24')
	}
	outbound {
		to {R}
		private 127.0.0.0/8
		timeout 1s
		region europe-west1
		endpoint net-b-egress europe-west1 127.0.42.1
	}
}`, "PORT", port, "R", r.addr))

	for i := range 4 {
		obMustA(t, s, "127.0.1.10", fmt.Sprintf("a-%d.corp.internal.", i), "192.0.2.1")
		obMustA(t, s, "127.0.1.11", fmt.Sprintf("a-x%d.corp.internal.", i), "192.0.2.1")
		obMustA(t, s, "127.0.2.10", fmt.Sprintf("b-%d.corp.internal.", i), "192.0.2.1")
	}
	if got := r.sources("a-"); got["127.0.41.1"] != 8 || len(got) != 1 {
		t.Errorf("O-9: network A's queries by source %v, want 8 from 127.0.41.1 only", got)
	}
	if got := r.sources("b-"); got["127.0.42.1"] != 4 || len(got) != 1 {
		t.Errorf("O-9: network B's queries by source %v, want 4 from 127.0.42.1 only", got)
	}

	// A client of neither network: no zone is authorized for it.
	if m, _, err := obAsk(s, "127.0.3.10", "c-0.corp.internal.", 5*time.Second); err != nil || m.Rcode != dns.RcodeRefused {
		t.Errorf("a client outside both networks: %v %v, want REFUSED", m, err)
	}
	if got := r.sources("c-"); len(got) != 0 {
		t.Errorf("a client outside both networks reached the resolver: %v", got)
	}

	// Isolation holds under failure: network A's only endpoint is cut, its queries fail
	// (SERVFAIL) and never leave from network B's source.
	r.silence("127.0.41.1")
	m, _, err := obAsk(s, "127.0.1.10", "cut-a.corp.internal.", 5*time.Second)
	if err != nil || m.Rcode != dns.RcodeServerFailure {
		t.Errorf("network A with its endpoint cut: %v %v, want SERVFAIL", m, err)
	}
	if got := r.sources("cut-a"); got["127.0.42.1"] != 0 {
		t.Errorf("O-9: network A's query leaked through network B's endpoint: %v", got)
	}
	obMustA(t, s, "127.0.2.10", "b-after.corp.internal.", "192.0.2.1")
}

// TestScenarioOutboundHubAndSpoke reproduces "Reenvío unificado en diferentes redes de VPC
// (topología de concentrador y radio)": the egress endpoint is created once, in the hub
// network, and the forwarding zones of the spoke networks use the hub's endpoint (named alone:
// `endpoint hub-egress`). Every spoke's queries reach the on-prem resolver from the hub's source
// (O-9); declaring the endpoint a second time is a configuration error.
func TestScenarioOutboundHubAndSpoke(t *testing.T) {
	r := obStartResolvers(t, "127.0.50.1")[0]
	port := coretest.FreePort(t)
	const tmpl = `corp.internal:{PORT} {
	bind 127.0.0.1
	view hub {
		expr incidr(client_ip(), '127.0.1.0/24')
	}
	outbound {
		to {R}
		private 127.0.0.0/8
		endpoint hub-egress europe-west1 127.0.51.1
	}
}
corp.internal:{PORT} {
	bind 127.0.0.1
	view spoke-1 {
		expr incidr(client_ip(), '127.0.5.0/24')
	}
	outbound {
		to {R}
		private 127.0.0.0/8
		endpoint hub-egress{SPOKE}
	}
}
corp.internal:{PORT} {
	bind 127.0.0.1
	view spoke-2 {
		expr incidr(client_ip(), '127.0.6.0/24')
	}
	outbound {
		to {R}
		private 127.0.0.0/8
		endpoint hub-egress
	}
}`
	s := coretest.Start(t, obCorefile(tmpl, "PORT", port, "R", r.addr, "SPOKE", ""))
	for i := range 3 {
		obMustA(t, s, "127.0.1.10", fmt.Sprintf("hub-%d.corp.internal.", i), "192.0.2.1")
		obMustA(t, s, "127.0.5.10", fmt.Sprintf("spoke1-%d.corp.internal.", i), "192.0.2.1")
		obMustA(t, s, "127.0.6.10", fmt.Sprintf("spoke2-%d.corp.internal.", i), "192.0.2.1")
	}
	for _, p := range []string{"hub-", "spoke1-", "spoke2-"} {
		if got := r.sources(p); got["127.0.51.1"] != 3 || len(got) != 1 {
			t.Errorf("O-9: %s* queries by source %v, want 3 from the hub's endpoint 127.0.51.1 only", p, got)
		}
	}

	// The spoke declaring its own endpoint under the hub's name is refused: an endpoint is
	// declared once and named alone elsewhere.
	_, err := coretest.New(obCorefile(tmpl, "PORT", coretest.FreePort(t), "R", r.addr, "SPOKE", " europe-west1 127.0.52.1"))
	if err == nil || !strings.Contains(err.Error(), `endpoint "hub-egress" declared twice`) {
		t.Errorf("hub endpoint declared twice: %v, want an error naming it", err)
	}
}

// TestScenarioOutboundEndpointFailure reproduces the passage on endpoint failure in "Extremos de
// salida" ("si un extremo de la región A deja de estar disponible, el tráfico se enruta
// automáticamente a un extremo en buen estado de la región B. Cuando el extremo de la región A
// vuelva a estar en buen estado, el algoritmo de clasificación ... comenzará a preferirlo
// nuevamente"): under steady load, the best endpoint's path goes silent; queries move to the
// next endpoint with at most the first attempt failing per in-flight query and no client
// failure (O-6); when the path returns, the recovery is detected by probing and the endpoint is
// preferred again (O-5, O-6).
func TestScenarioOutboundEndpointFailure(t *testing.T) {
	const (
		near, far = "127.0.61.1", "127.0.62.1"
		client    = "127.0.1.10"
		workers   = 20
		pace      = 20 * time.Millisecond // per worker: at most 1000 queries/s in all
		warm      = 1500                  // successes through near before the cut
		window    = 200                   // queries that decide "preferred again"
	)
	r := obStartResolvers(t, "127.0.60.1")[0]
	// The far region's path has a longer round trip, as a path to another region does (50 ms,
	// less than a real transatlantic one): the near endpoint is the better one on latency (O-5)
	// as well as on distance. Without it the two loopback paths are identical and the ranking
	// follows the process's own scheduling noise under load: a pair measured once by an idle
	// probe can look faster than the loaded leader and take the traffic, and the leader's
	// latency is re-measured only every 30 s when nothing fails.
	r.slow(far, 50*time.Millisecond)
	s := coretest.Start(t, obCorefile(`corp.internal:0 {
	bind 127.0.0.1
	outbound {
		to {R}
		private 127.0.0.0/8
		timeout 3s
		region europe-west1
		subnet europe-west1 127.0.1.0/24
		endpoint near europe-west1 127.0.61.1
		endpoint far us-east1 127.0.62.1
	}
}`, "R", r.addr))

	// Probes ask the zone apex SOA (README of outbound, "Exploration"): they are told
	// apart from the load by their name.
	isLoad := func(e obSeen) bool { return strings.HasPrefix(e.name, "load-") }

	load := obStartLoad(s, client, "load", "corp.internal.", workers, pace, 40*time.Second)
	defer load.stop()

	// Steady state: every load query leaves through the nearest endpoint.
	obEventually(t, 15*time.Second, "warm-up through the near endpoint", func() bool {
		return r.sources("load-")[near] >= warm
	})
	if got := r.sources("load-"); got[far] != 0 {
		t.Fatalf("O-5: before any failure the load went through %v, want the near endpoint %s only", got, near)
	}

	// Cut: the resolver drops everything from near's source.
	cutAt := len(r.log())
	cut := time.Now()
	r.silence(near)
	farAfter := func(from int) (n int) {
		for _, e := range r.log()[from:] {
			if isLoad(e) && e.src.String() == far && !e.dropped {
				n++
			}
		}
		return n
	}
	obEventually(t, 10*time.Second, "load moving to the far endpoint", func() bool { return farAfter(cutAt) >= 300 })
	movedIn := time.Since(cut)
	// Keep the path cut until a probe through it has failed, so the return below is detected by
	// exploration and not by client traffic.
	obEventually(t, 10*time.Second, "a probe through the cut path", func() bool {
		for _, e := range r.log()[cutAt:] {
			if e.src.String() == near && e.dropped && !isLoad(e) {
				return true
			}
		}
		return false
	})

	// Return: near answers again and takes the load back.
	backAt := len(r.log())
	back := time.Now()
	r.restore(near)
	var share string
	obEventually(t, 20*time.Second, "the near endpoint preferred again", func() bool {
		var last []obSeen
		for _, e := range r.log()[backAt:] {
			if isLoad(e) && !e.dropped {
				last = append(last, e)
			}
		}
		if len(last) < window {
			return false
		}
		n := 0
		for _, e := range last[len(last)-window:] {
			if e.src.String() == near {
				n++
			}
		}
		share = fmt.Sprintf("%d/%d", n, window)
		return n >= window*9/10
	})
	preferredIn := time.Since(back)
	results := load.stop()

	// No client saw the failure: every load query was answered NOERROR with the record.
	failed := 0
	for _, res := range results {
		if res.err != nil || res.rcode != dns.RcodeSuccess || res.addrs != "192.0.2.1" {
			if failed < 5 {
				t.Errorf("O-6: load query %s failed: rcode %d, answer %q, err %v, after %s", res.name, res.rcode, res.addrs, res.err, res.took)
			}
			failed++
		}
	}
	// At most the first attempt failed, and only for the queries in flight at the cut.
	type fate struct{ dropped, answeredFar, answeredNear int }
	fates := map[string]*fate{}
	for _, e := range r.log() {
		if !isLoad(e) {
			continue
		}
		f := fates[e.name]
		if f == nil {
			f = &fate{}
			fates[e.name] = f
		}
		switch {
		case e.dropped:
			f.dropped++
		case e.src.String() == far:
			f.answeredFar++
		default:
			f.answeredNear++
		}
	}
	lost := 0
	for name, f := range fates {
		if f.dropped == 0 {
			continue
		}
		lost++
		if f.dropped > 1 || f.answeredFar != 1 || f.answeredNear != 0 {
			t.Errorf("O-6: %s: %d attempts lost, %d answered through far, %d through near; want one lost first attempt, then the far endpoint", name, f.dropped, f.answeredFar, f.answeredNear)
		}
	}
	if lost > workers {
		t.Errorf("O-6: %d queries lost a first attempt; at most the %d in flight at the cut may", lost, workers)
	}
	t.Logf("%d load queries (%d failed); %d lost their first attempt at the cut; moved to far in %s; near preferred again (%s of the last queries) %s after its return",
		len(results), failed, lost, movedIn.Round(time.Millisecond), share, preferredIn.Round(time.Millisecond))
}
