package test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pschealth"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

// The sequence test drives a real server through a seeded random sequence of Corefile reloads
// (checks, record sets, load balancers, composites, a second server block and its outbound
// endpoints added and removed), failed Corefile reloads (a busy port, a parse error, a check
// nobody defines), record-set file rewrites (some naming load balancers as internal load
// balancers, some racing a Corefile reload) and files with a syntax error, and checks the
// invariant of H-6 after every step:
//   - what is probed is what the live configuration names: the probe registry's target_state
//     series, exactly; probes arriving on real HTTP targets, per check and prober source: a first
//     one soon after a target is named, then within a bounded window, every named target again
//     every twenty steps, and none for a target no longer named beyond the one round that may have
//     been in flight;
//   - every per-target, per-check, per-VIP, per-record-set, per-composite and per-endpoint series
//     belongs to the live configuration;
//   - the board holds what the live configuration names and nothing else (coretest.Held);
//   - what is computed, a VIP, a composite, a configured share, is the live configuration's
//     result (the newest instance writes, and the survivor of a failed reload writes again).
//
// At the end goroutines and open file descriptors are back to their baseline.
//
// LIFECYCLE_STEPS (default 100) and LIFECYCLE_SEED (default: from the clock) make a longer run or
// replay one; the seed is logged, and named again on failure.

const (
	// seqWindow bounds the gap between two probes of a (check, target, source) that stays named:
	// the interval is 1 s and a new target's first round comes within one interval. A probe that
	// is late is waited for up to seqLate more before the test fails.
	seqWindow = 3 * time.Second
	seqLate   = 10 * time.Second
	// seqFirst bounds the wait for the first probe of a (check, target, source) newly named: its
	// first round comes within one interval.
	seqFirst = 1500 * time.Millisecond
	// Every seqSettle steps the test waits for a probe of every named triple and for the outbound
	// series of every named endpoint.
	seqSettle = 20
)

// tripleState follows one (check, target, source) through the sequence.
type tripleState struct {
	named bool
	since time.Time // when it became named
	base  int       // probes it had when it stopped being named
	allow int       // probes it may still get while not named: rounds in flight when released
}

func envInt(t *testing.T, name string, def uint64) uint64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: want a number", name, v)
	}
	return n
}

// H-6: the sequence test of issue 11.
func TestLifecycleSequenceH6(t *testing.T) {
	steps := int(envInt(t, "LIFECYCLE_STEPS", 100))
	seed := envInt(t, "LIFECYCLE_SEED", uint64(time.Now().UnixNano()))
	t.Logf("LIFECYCLE_SEED=%d LIFECYCLE_STEPS=%d", seed, steps)
	step, what := 0, "start"
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("failed at step %d (%s); replay with LIFECYCLE_SEED=%d LIFECYCLE_STEPS=%d", step, what, seed, steps)
		}
	})
	r := seqRand{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	coretest.CaptureLog(t)

	// Baselines, once the runtime's network poller exists.
	if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		ln.Close()
	}
	leakOpts := append(coretest.ServerLoops(), goleak.IgnoreCurrent())
	fds := openFDsBut(t, nil)

	pt := startProbeTargets(t, seqTargets, "127.0.77.7", "127.0.77.8")
	resolvers := obStartResolvers(t, seqResolvers...)
	env := seqEnv{port: pt.port, file: filepath.Join(t.TempDir(), "recordsets.yaml"), obPort: resolvers[0].port()}
	fileVersion := 0
	writeFile := func(body string) {
		t.Helper()
		if err := os.WriteFile(env.file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		fileVersion++
		when := time.Unix(1_700_000_000+int64(fileVersion), 0)
		if err := os.Chtimes(env.file, when, when); err != nil {
			t.Fatal(err)
		}
	}
	env.metrics = "127.0.0.1:" + coretest.FreePort(t)
	url := "http://" + env.metrics + "/metrics"
	fileReloads := func(result string) float64 {
		return counterValue(t, url, "coredns_routingpolicy_reloads_total", map[string]string{"zone": seqZone, "result": result})
	}

	cfg := seqConfig{checks: [3]bool{true, true, false}}
	cfg.inline = []seqSet{{name: "in1." + seqZone, check: "sq-c1", addrs: []string{"127.0.77.1", "127.0.77.2"}}}
	var fileSets []seqSet
	writeFile(recordSetsFile(fileSets))
	s := coretest.Start(t, cfg.corefile(env, "", ""))

	states := map[probeKey]*tripleState{}
	for _, ch := range seqChecks {
		for _, a := range seqTargets {
			for _, src := range []string{"127.0.78.1", "127.0.78.2", "127.0.78.3"} {
				states[probeKey{check: ch.name, target: a, source: src}] = &tripleState{}
			}
		}
	}
	// settle records that the configuration is now cfg with fileSets.
	settle := func() {
		now := time.Now()
		want := cfg.triples(fileSets)
		for k, st := range states {
			switch {
			case want[k] && !st.named:
				st.named, st.since = true, now
			case !want[k] && st.named:
				st.named = false
				st.base, _ = pt.count(k)
				st.allow = 1
			}
		}
	}
	// expose records that a failed reload's instance started, for a moment, with c.
	expose := func(c seqConfig) {
		for k := range c.triples(fileSets) {
			if st := states[k]; !st.named {
				st.allow++
			}
		}
	}
	settle()
	// reload replaces the Corefile once the running instance answers: a miekg/dns server stopped
	// before its serve loop started keeps serving its handed-over socket with the old plugins
	// (coretest.ServerLoops), so a reload right after a start or another reload would leave
	// queries to the old configuration.
	reload := func(corefile string) error {
		t.Helper()
		if _, err := s.Query(seqZone, dns.TypeSOA); err != nil {
			t.Fatalf("step %d: the running instance does not answer: %v", step, err)
		}
		return s.Reload(corefile)
	}

	kinds := map[string]int{}
	spent := map[string]time.Duration{} // by kind of step, the step and its checks
	broken := false                     // the record-set file has a syntax error: a Corefile cannot load
	for step = 1; step <= steps; step++ {
		began := time.Now()
		switch n := r.IntN(100); {
		case n < 45: // a Corefile reload
			next, change := r.mutate(cfg)
			if r.IntN(3) == 0 {
				var more string
				next, more = r.mutate(next)
				change += "; " + more
			}
			what = "reload: " + change
			err := reload(next.corefile(env, "", ""))
			switch ok := next.valid(fileSets) && !broken; {
			case ok && err != nil:
				t.Fatalf("step %d (%s): a valid Corefile was refused: %v", step, what, err)
			case !ok && err == nil:
				t.Fatalf("step %d (%s): a Corefile naming an undefined check, or a broken file, was accepted", step, what)
			case ok:
				cfg = next
			}
		case n < 55: // a reload that fails after startup: its listener cannot bind
			next, change := r.mutate(cfg)
			what = "failed reload (busy port): " + change
			busy, port := busyListener(t) // a fresh port each time: nothing else can have taken it
			err := reload(next.corefile(env, "", "busy.test:"+port+" {\n\tbind 127.0.0.1\n\twhoami\n}\n"))
			busy()
			if err == nil {
				t.Fatalf("step %d (%s): a reload onto a busy port succeeded", step, what)
			}
			if next.valid(fileSets) && !broken {
				expose(next) // its instance started before its listener failed
			}
		case n < 63: // a reload that fails at setup
			next, change := r.mutate(cfg)
			extra := "\tnosuchdirective\n"
			if r.IntN(2) == 0 {
				extra = ""
				next.inline = append(next.inline, seqSet{name: "bad." + seqZone, addrs: []string{"x"}})
			}
			what = "failed reload (parse error): " + change
			if err := reload(next.corefile(env, extra, "")); err == nil {
				t.Fatalf("step %d (%s): a Corefile with a parse error was accepted", step, what)
			}
		case n < 71: // a record-set file rewrite (which repairs a broken one)
			next := r.fileSets(cfg)
			what = fmt.Sprintf("file rewrite: %v", next)
			before := fileReloads("success")
			writeFile(recordSetsFile(next))
			waitFileReload(t, url, seqZone, "success", before)
			fileSets, broken = next, false
		case n < 96: // a file rewrite racing a Corefile reload: no wait for the file reload
			nextFile := r.fileSets(cfg)
			next, change := r.mutate(cfg)
			what = fmt.Sprintf("file rewrite racing a reload: %v; reload: %s", nextFile, change)
			before := fileReloads("success")
			writeFile(recordSetsFile(nextFile))
			err := reload(next.corefile(env, "", ""))
			switch ok := next.valid(nextFile); {
			case ok && err != nil:
				t.Fatalf("step %d (%s): a valid Corefile was refused: %v", step, what, err)
			case !ok && err == nil:
				t.Fatalf("step %d (%s): a Corefile naming an undefined check was accepted", step, what)
			case ok:
				cfg = next // its instance read the new file at setup
			default:
				// The survivor reads the new file (its checks are the survivor's) with its own
				// reload loop, before or after the failed reload.
				waitFileReload(t, url, seqZone, "success", before)
			}
			fileSets, broken = nextFile, false
		default: // a file with a syntax error: the last good data stays
			what = "file with a syntax error"
			before := fileReloads("failure")
			writeFile("- {name: broken\n")
			waitFileReload(t, url, seqZone, "failure", before)
			broken = true
		}
		kind, _, _ := strings.Cut(what, ":")
		kinds[kind]++
		settle()
		check := seqCheck{t: t, s: s, url: url, env: env, pt: pt, cfg: cfg, file: fileSets, states: states, step: step, what: what}
		check.all()
		spent[kind] += time.Since(began)
		if step%seqSettle == 0 {
			began = time.Now()
			probedAgain(t, pt, states)
			check.outboundExact()
			spent["settle"] += time.Since(began)
		}
	}
	t.Logf("steps: %v; time: %v", kinds, spent)

	// Every named triple is probed once more, then nothing but the live configuration was.
	what = "end"
	probedAgain(t, pt, states)
	check := seqCheck{t: t, s: s, url: url, env: env, pt: pt, cfg: cfg, file: fileSets, states: states, step: step, what: what}
	check.all()
	check.outboundExact()

	dnsUDP, dnsTCP := s.UDP, s.TCP
	s.Stop()
	if got := scrape(t, "", "coredns_healthcheck_target_state"); len(got) != 0 {
		t.Errorf("target_state after shutdown: %v", got)
	}
	for _, k := range seqKeys() {
		if coretest.Held(health.Default, k) {
			t.Errorf("%v still held on the board after shutdown", k)
		}
	}
	pt.close()
	for _, r := range resolvers {
		r.stop()
	}
	// Left out of both counts, as not ours: the goroutine and listener of CoreDNS's prometheus
	// plugin that a failed reload's instance started (the surviving instance's OnRestartFailed
	// does not take them back), and the server's own DNS sockets that caddy hands from instance to
	// instance, of which a reload failing after startup leaves copies (CoreDNS with whoami alone
	// does the same).
	leakOpts = append(leakOpts, goleak.IgnoreAnyFunction(metricsServer))
	upstream := []string{dnsUDP, dnsTCP, env.metrics}
	deadline := time.Now().Add(20 * time.Second)
	for {
		leak := goleak.Find(leakOpts...)
		n := openFDsBut(t, upstream)
		if leak == nil && n <= fds {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after shutdown: %d open file descriptors (baseline %d): %v; goroutines: %v", n, fds, fdTargets(t), leak)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const metricsServer = "github.com/coredns/coredns/plugin/metrics.(*Metrics).OnStartup.func1"

// probedAgain waits for a probe of every named triple.
func probedAgain(t *testing.T, pt *probeTargets, states map[probeKey]*tripleState) {
	t.Helper()
	now := time.Now()
	for k, st := range states {
		if st.named {
			pt.waitProbe(t, k, now, seqLate)
		}
	}
}

// seqCheck checks the invariant of H-6 after one step against cfg and file, the live
// configuration.
type seqCheck struct {
	t      *testing.T
	s      *coretest.Server
	url    string
	env    seqEnv
	pt     *probeTargets
	cfg    seqConfig
	file   []seqSet
	states map[probeKey]*tripleState
	step   int
	what   string
}

func (c seqCheck) fail(format string, args ...any) {
	c.t.Helper()
	c.t.Fatalf("step %d (%s): %s\nCorefile model: %+v\nfile: %+v", c.step, c.what, fmt.Sprintf(format, args...), c.cfg, c.file)
}

func (c seqCheck) all() {
	c.t.Helper()
	c.answers()
	c.series(parseMetrics(c.t, fetchMetrics(c.t, c.url)))
	c.board()
	c.computed()
	c.probes()
}

// answers: every record set answers from its own addresses; asking also creates its
// answers_total.
func (c seqCheck) answers() {
	c.t.Helper()
	for _, set := range c.cfg.sets(c.file) {
		m, err := c.s.Query(set.name, dns.TypeA)
		if err != nil {
			c.fail("%v", err)
		}
		if m.Rcode != dns.RcodeSuccess || len(m.Answer) == 0 {
			c.fail("%s: rcode %s, %d answers", set.name, dns.RcodeToString[m.Rcode], len(m.Answer))
		}
		for _, rr := range m.Answer {
			if a, ok := rr.(*dns.A); !ok || !slices.Contains(set.answers(), a.A.String()) {
				c.fail("%s answered %s, not one of %v", set.name, rr, set.answers())
			}
		}
	}
}

// series: the probe registry's series are exactly the probed pairs and the VIPs; the other series
// belong to the live configuration.
func (c seqCheck) series(m map[string][]metricSample) {
	c.t.Helper()
	pairs := c.cfg.pairs(c.file)
	want := make([]string, 0, len(pairs)+len(c.cfg.lbs))
	var got []string
	for p := range pairs {
		want = append(want, p[0]+" "+addrPort(p[1], c.env.port))
	}
	for _, lb := range c.cfg.lbs {
		want = append(want, " "+lb.vip)
	}
	for _, s := range m["coredns_healthcheck_target_state"] {
		if strings.HasPrefix(s.labels["check"], "sq-") || strings.HasPrefix(s.labels["target"], "10.77.") {
			got = append(got, s.labels["check"]+" "+s.labels["target"])
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		c.fail("target_state series %q, want %q", got, want)
	}

	var checks, regions []string
	for i, ch := range seqChecks {
		if c.cfg.checks[i] {
			checks = append(checks, ch.name)
			for _, r := range c.cfg.regions(i) {
				regions = append(regions, ch.name+" "+r[0])
			}
		}
	}
	slices.Sort(regions)
	if got := prefixed(values(m["coredns_healthcheck_probes_total"], "check"), "sq-"); !slices.Equal(got, checks) {
		c.fail("probes_total checks %v, want %v", got, checks)
	}
	if got := prefixed(values(m["coredns_healthcheck_probes_total"], "check", "region"), "sq-"); !isSubset(got, regions) {
		c.fail("probes_total regions %v, configured %v", got, regions)
	}
	if got := prefixed(values(m["coredns_healthcheck_probe_duration_seconds_count"], "check", "region"), "sq-"); !isSubset(got, regions) {
		c.fail("probe_duration_seconds regions %v, configured %v", got, regions)
	}
	if got := prefixed(values(m["coredns_healthcheck_state_transitions_total"], "check"), "sq-"); len(got) > 0 && !isSubset(got, checks) {
		c.fail("state_transitions_total checks %v, defined %v", got, checks)
	}

	comps := make([]string, 0, len(c.cfg.comps))
	srcs := make([]string, 0, len(c.cfg.comps))
	for _, k := range c.cfg.comps {
		comps = append(comps, fmt.Sprintf("sq-k%d %s", k.n, seqDests[k.n-1]))
		srcs = append(srcs, fmt.Sprintf("sq-s%d", k.n))
	}
	slices.Sort(comps)
	slices.Sort(srcs)
	if got := prefixed(values(m["coredns_pschealth_composite_state"], "composite", "destination"), "sq-"); !slices.Equal(got, comps) {
		c.fail("composite_state series %v, want %v", got, comps)
	}
	if got := prefixed(values(m["coredns_pschealth_composite_published"], "composite", "destination"), "sq-"); !slices.Equal(got, comps) {
		c.fail("composite_published series %v, want %v", got, comps)
	}
	c.published()
	if got := prefixed(values(m["coredns_pschealth_source_state"], "source"), "sq-"); !slices.Equal(got, srcs) {
		c.fail("source_state sources %v, want %v", got, srcs)
	}

	// The record sets' series, and the configured share of each item: each has weight 1.
	var items []string
	names := make([]string, 0, len(c.cfg.sets(c.file)))
	shares := map[string]float64{}
	for _, set := range c.cfg.sets(c.file) {
		zone := seqZone
		if strings.HasSuffix(set.name, "."+seqZone2) {
			zone = seqZone2
		}
		names = append(names, zone+" "+set.name+"/A")
		for i := range set.answers() {
			k := fmt.Sprintf("%s %s/A %d", zone, set.name, i)
			items = append(items, k)
			shares[k] = 1 / float64(len(set.answers()))
		}
	}
	slices.Sort(items)
	slices.Sort(names)
	ours := func(l map[string]string) bool { return l["zone"] == seqZone || l["zone"] == seqZone2 }
	var gotItems []string
	for _, s := range m["coredns_routingpolicy_wrr_configured_share"] {
		if !ours(s.labels) {
			continue
		}
		k := s.labels["zone"] + " " + s.labels["name"] + " " + s.labels["item"]
		gotItems = append(gotItems, k)
		if want, ok := shares[k]; ok && s.value != want {
			c.fail("wrr_configured_share of %s is %v, the live configuration's is %v", k, s.value, want)
		}
	}
	var gotNames []string
	for _, s := range m["coredns_routingpolicy_answers_total"] {
		if ours(s.labels) {
			gotNames = append(gotNames, s.labels["zone"]+" "+s.labels["name"])
			if k := s.labels["zone"] + " " + s.labels["name"] + " " + s.labels["item"]; !slices.Contains(items, k) {
				c.fail("answers_total has item %s, not configured", k)
			}
		}
	}
	slices.Sort(gotItems)
	slices.Sort(gotNames)
	if !slices.Equal(gotItems, items) {
		c.fail("wrr_configured_share items %v, want %v", gotItems, items)
	}
	if gotNames = slices.Compact(gotNames); !slices.Equal(gotNames, names) {
		c.fail("answers_total record sets %v, want %v", gotNames, names)
	}

	// The outbound series name endpoints and targets of the live configuration (a new pair's
	// appear within an exploration round: outboundExact waits for them).
	ob := c.cfg.obPairs(c.env.obPort)
	for _, name := range []string{"coredns_outbound_rank", "coredns_outbound_up", "coredns_outbound_probes_total"} {
		var got []string
		for _, s := range m[name] {
			if s.labels["zone"] == seqOB {
				got = append(got, s.labels["endpoint"]+" "+s.labels["target"])
			}
		}
		if got = slices.Compact(slices.Sorted(slices.Values(got))); !isSubset(got, ob) {
			c.fail("%s pairs %v, configured %v", name, got, ob)
		}
	}
}

// outboundExact waits until the outbound series name every endpoint and target pair of the live
// configuration, and nothing else.
func (c seqCheck) outboundExact() {
	c.t.Helper()
	want := c.cfg.obPairs(c.env.obPort)
	deadline := time.Now().Add(seqLate)
	for {
		m := parseMetrics(c.t, fetchMetrics(c.t, c.url))
		missing := ""
		for _, name := range []string{"coredns_outbound_rank", "coredns_outbound_up", "coredns_outbound_probes_total"} {
			var got []string
			for _, s := range m[name] {
				if s.labels["zone"] == seqOB {
					got = append(got, s.labels["endpoint"]+" "+s.labels["target"])
				}
			}
			if got = slices.Compact(slices.Sorted(slices.Values(got))); !slices.Equal(got, want) {
				missing = fmt.Sprintf("%s pairs %v, want %v", name, got, want)
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			c.fail("%s", missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// board: the process board holds what the live configuration names, and nothing else of ours.
func (c seqCheck) board() {
	c.t.Helper()
	want := c.cfg.held(c.file)
	for _, k := range seqKeys() {
		if got := coretest.Held(health.Default, k); got != want[k] {
			c.fail("board reference of %v: held %v, the live configuration holds it: %v", k, got, want[k])
		}
	}
}

// published: composite_published of every composite says whether the live configuration is a
// dry run. Polled: when a failed reload abandons an instance that wrote the gauge, its leave wakes
// the surviving instance, whose loop writes the gauge back a moment later.
func (c seqCheck) published() {
	c.t.Helper()
	want := map[bool]float64{true: 0, false: 1}[c.cfg.dryRun]
	deadline := time.Now().Add(seqLate)
	for {
		wrong := ""
		for _, s := range parseMetrics(c.t, fetchMetrics(c.t, c.url))["coredns_pschealth_composite_published"] {
			if strings.HasPrefix(s.labels["composite"], "sq-") && s.value != want {
				wrong = fmt.Sprintf("composite_published of %s is %v, dry run %v", s.labels["composite"], s.value, c.cfg.dryRun)
			}
		}
		if wrong == "" {
			return
		}
		if time.Now().After(deadline) {
			c.fail("%s", wrong)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// computed: every VIP and composite is the live configuration's result, computed from the
// backends' verdicts on the board: the newest instance writes, and after a failed reload the
// survivor writes again. A VIP whose backends cannot decide it yet keeps whatever it had (H-4).
// What is computed follows the board asynchronously: poll.
func (c seqCheck) computed() {
	c.t.Helper()
	deadline := time.Now().Add(seqLate)
	for {
		wrong := c.computedWrong()
		if wrong == "" {
			return
		}
		if time.Now().After(deadline) {
			c.fail("%s", wrong)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c seqCheck) computedWrong() string {
	tally := func(check string, backends []string) pschealth.Tally {
		var t pschealth.Tally
		for _, a := range backends {
			st, _ := coretest.OnBoard(health.Default, health.Key{Check: check, Addr: netip.MustParseAddr(a)})
			t.Add(st.State)
		}
		return t
	}
	for _, v := range seqVIPs {
		i := slices.IndexFunc(c.cfg.lbs, func(lb seqLB) bool { return lb.vip == v })
		st, published := coretest.OnBoard(health.Default, health.Key{Addr: netip.MustParseAddr(v)})
		if i < 0 {
			if published {
				return fmt.Sprintf("VIP %s is published, no load balancer names it", v)
			}
			continue
		}
		lb := c.cfg.lbs[i]
		t := tally(lb.check, lb.backends)
		// HC-4: decided once the backends without a verdict cannot change the outcome.
		want := health.Unknown
		switch n := t.Total(); {
		case t.Healthy*100 >= lb.threshold*n:
			want = health.Healthy
		case (t.Healthy+t.Unknown)*100 < lb.threshold*n:
			want = health.Unhealthy
		}
		if !published || (want != health.Unknown && st.State != want) {
			return fmt.Sprintf("VIP %s (%+v): %s, published %v; its backends %+v make it %s", v, lb, st.State, published, t, want)
		}
	}
	gauges := gaugeSamples("coredns_pschealth_composite_state")
	for n, d := range seqDests {
		i := slices.IndexFunc(c.cfg.comps, func(k seqComp) bool { return k.n == n+1 })
		st, published := coretest.OnBoard(health.Default, health.Key{Addr: netip.MustParseAddr(d)})
		if i < 0 || c.cfg.dryRun {
			if published {
				return fmt.Sprintf("destination %s is published, no composite publishes it (dry run %v)", d, c.cfg.dryRun)
			}
			if i < 0 {
				continue
			}
		}
		k := c.cfg.comps[i]
		t := tally(k.check, k.backends)
		want := pschealth.DefaultPolicy().Evaluate(t)
		if !c.cfg.dryRun && (!published || st.State != want) {
			return fmt.Sprintf("destination %s of sq-k%d over %v: %s, published %v; its backends %+v make it %s", d, k.n, k.backends, st.State, published, t, want)
		}
		for _, s := range gauges {
			if s.labels["composite"] == fmt.Sprintf("sq-k%d", k.n) && s.labels["state"] == want.String() && s.value != 1 {
				return fmt.Sprintf("composite_state of sq-k%d (dry run %v): %s is %v; its backends %+v make it %s", k.n, c.cfg.dryRun, want, s.value, t, want)
			}
		}
	}
	return ""
}

// probes: what the targets see: nothing for what is not named beyond a round in flight when it
// was released, and a recent probe for what has been named for a while.
func (c seqCheck) probes() {
	c.t.Helper()
	now := time.Now()
	for _, k := range slices.SortedFunc(maps.Keys(c.states), func(a, b probeKey) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) }) {
		st := c.states[k]
		n, last := c.pt.count(k)
		switch {
		case !st.named && n > st.base+st.allow:
			c.fail("%v is not named but got %d probes since (allowed %d)", k, n-st.base, st.allow)
		case st.named && now.Sub(st.since) >= seqFirst && !last.After(st.since):
			c.pt.waitProbe(c.t, k, st.since, seqLate) // its first probe
		case st.named && now.Sub(st.since) >= seqWindow && now.Sub(last) > seqWindow:
			c.pt.waitProbe(c.t, k, now.Add(-seqWindow), seqLate)
		}
	}
}

// gaugeSamples returns the series of gauge name in the process registry, with their values.
func gaugeSamples(name string) []metricSample {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return nil
	}
	var out []metricSample
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			s := metricSample{labels: map[string]string{}, value: m.GetGauge().GetValue()}
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			out = append(out, s)
		}
	}
	return out
}

// values returns the sorted distinct values of labels (joined by a space) over samples.
func values(samples []metricSample, labels ...string) []string {
	out := make([]string, 0, len(samples))
	for _, s := range samples {
		v := make([]string, len(labels))
		for i, l := range labels {
			v[i] = s.labels[l]
		}
		out = append(out, strings.Join(v, " "))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func prefixed(vs []string, prefix string) []string {
	return slices.DeleteFunc(slices.Clone(vs), func(v string) bool { return !strings.HasPrefix(v, prefix) })
}

func isSubset(a, b []string) bool {
	for _, v := range a {
		if !slices.Contains(b, v) {
			return false
		}
	}
	return true
}
