package test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
	"go.uber.org/goleak"
)

// The sequence test drives a real server through a seeded random sequence of Corefile reloads
// (checks, record sets, load balancers, composites added and removed), failed Corefile reloads (a
// busy port, a parse error, a check nobody defines), record-set file rewrites and files with a
// syntax error, and checks the invariant of H-6 after every step: what is probed is what the live
// configuration names (the probe registry's target_state series, exactly; probes arriving on real
// HTTP targets, per check and prober source: a first one soon after a target is named, then
// within a bounded window, every named target again every ten steps, and none for a target no
// longer named beyond the one round that may have been in flight) and every per-target,
// per-check, per-VIP, per-record-set and per-composite series belongs to the live configuration.
// At the end goroutines and open file descriptors are back to their baseline.
//
// LIFECYCLE_STEPS (default 100) and LIFECYCLE_SEED (default: from the clock) make a longer run or
// replay one; the seed is logged, and named again on failure.

const (
	seqZone = "seq.test."
	// seqWindow bounds the gap between two probes of a (check, target, source) that stays named:
	// the interval is 1 s and a new target's first round comes within one interval. A probe that
	// is late is waited for up to seqLate more before the test fails.
	seqWindow = 3 * time.Second
	seqLate   = 10 * time.Second
	// seqFirst bounds the wait for the first probe of a (check, target, source) newly named: its
	// first round comes within one interval.
	seqFirst = 1500 * time.Millisecond
	// Every seqSettle steps the test waits for a probe of every named triple.
	seqSettle = 10
)

// seqTargets are the probed addresses; the last two answer 503, so verdicts differ.
var seqTargets = []string{"127.0.77.1", "127.0.77.2", "127.0.77.3", "127.0.77.4", "127.0.77.5", "127.0.77.6", "127.0.77.7", "127.0.77.8"}

// seqChecks are the checks a Corefile may define, each with its prober regions and sources.
var seqChecks = []struct {
	name    string
	regions [][2]string // region, source address
}{
	{"sq-c1", [][2]string{{"us-east1", "127.0.78.1"}, {"europe-west1", "127.0.78.2"}}},
	{"sq-c2", [][2]string{{"us-east1", "127.0.78.3"}}},
	{"sq-c3", [][2]string{{"us-east1", "127.0.78.1"}, {"europe-west1", "127.0.78.3"}}},
}

type seqSet struct {
	name, check string // check may be empty: nothing probed
	addrs       []string
}

type seqLB struct {
	vip, check string
	backends   []string
}

type seqComp struct {
	n        int // sq-kN over source sq-sN, destination 10.77.2.N
	check    string
	backends []string
}

// seqConfig is what a Corefile of the sequence says; the record-set file is apart.
type seqConfig struct {
	checks [3]bool
	inline []seqSet
	lbs    []seqLB
	comps  []seqComp
	dryRun bool
}

func (c seqConfig) clone() seqConfig {
	c.inline = slices.Clone(c.inline)
	c.lbs = slices.Clone(c.lbs)
	c.comps = slices.Clone(c.comps)
	return c
}

func (c seqConfig) defined(check string) bool {
	for i, ch := range seqChecks {
		if ch.name == check {
			return c.checks[i]
		}
	}
	return false
}

// valid reports whether a server can start from c with file: every check named is defined.
func (c seqConfig) valid(file []seqSet) bool {
	for _, s := range slices.Concat(c.inline, file) {
		if s.check != "" && !c.defined(s.check) {
			return false
		}
	}
	for _, lb := range c.lbs {
		if !c.defined(lb.check) {
			return false
		}
	}
	for _, k := range c.comps {
		if !c.defined(k.check) {
			return false
		}
	}
	return true
}

// pairs returns the (check, target) pairs c and file name: what must be probed.
func (c seqConfig) pairs(file []seqSet) map[[2]string]bool {
	out := map[[2]string]bool{}
	for _, s := range slices.Concat(c.inline, file) {
		if s.check != "" {
			for _, a := range s.addrs {
				out[[2]string{s.check, a}] = true
			}
		}
	}
	for _, lb := range c.lbs {
		for _, a := range lb.backends {
			out[[2]string{lb.check, a}] = true
		}
	}
	for _, k := range c.comps {
		for _, a := range k.backends {
			out[[2]string{k.check, a}] = true
		}
	}
	return out
}

// triples returns the (check, target, source) triples probes arrive as for pairs.
func triples(pairs map[[2]string]bool) map[probeKey]bool {
	out := map[probeKey]bool{}
	for p := range pairs {
		for _, ch := range seqChecks {
			if ch.name != p[0] {
				continue
			}
			for _, r := range ch.regions {
				out[probeKey{check: p[0], target: p[1], source: r[1]}] = true
			}
		}
	}
	return out
}

// corefile renders c; extra is added inside the server block, after is a server block of its own.
func (c seqConfig) corefile(port uint16, metrics, file, extra, after string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seq.test:0 {\n\tbind 127.0.0.1\n\tprometheus %s\n%s\thealthcheck {\n", metrics, extra)
	for i, ch := range seqChecks {
		if !c.checks[i] {
			continue
		}
		fmt.Fprintf(&b, "\t\tcheck %s {\n\t\t\tprotocol http\n\t\t\tport %d\n\t\t\tpath /%s\n\t\t\tinterval 1s\n\t\t\ttimeout 500ms\n", ch.name, port, ch.name)
		for _, r := range ch.regions {
			fmt.Fprintf(&b, "\t\t\tprober %s %s\n", r[0], r[1])
		}
		b.WriteString("\t\t}\n")
	}
	for _, lb := range c.lbs {
		fmt.Fprintf(&b, "\t\tloadbalancer %s {\n\t\t\tbackends %s\n\t\t\tcheck %s\n\t\t}\n", lb.vip, strings.Join(lb.backends, " "), lb.check)
	}
	b.WriteString("\t}\n")
	if len(c.comps) > 0 {
		b.WriteString("\tpschealth {\n")
		for _, k := range c.comps {
			fmt.Fprintf(&b, "\t\tsource sq-s%d {\n\t\t\tbackends %s\n\t\t\tcheck %s\n\t\t}\n", k.n, strings.Join(k.backends, " "), k.check)
			fmt.Fprintf(&b, "\t\tcomposite sq-k%d {\n\t\t\tsources sq-s%d\n\t\t\tdestination 10.77.2.%d\n\t\t}\n", k.n, k.n, k.n)
		}
		if c.dryRun {
			b.WriteString("\t\tdry_run\n")
		}
		b.WriteString("\t}\n")
	}
	fmt.Fprintf(&b, "\troutingpolicy {\n\t\treload 1s\n\t\trecordsets %s\n", file)
	for _, s := range c.inline {
		items := make([]string, len(s.addrs))
		for i, a := range s.addrs {
			items[i] = "1=" + a
		}
		fmt.Fprintf(&b, "\t\twrr %s A 30 %q", strings.TrimSuffix(s.name, "."+seqZone), strings.Join(items, ";"))
		if s.check != "" {
			fmt.Fprintf(&b, " healthcheck %s", s.check)
		}
		b.WriteString("\n")
	}
	b.WriteString("\t}\n}\n")
	b.WriteString(after)
	return b.String()
}

// recordSetsFile renders file sets in the managed-DNS export format.
func recordSetsFile(sets []seqSet) string {
	var b strings.Builder
	b.WriteString("# record sets of the sequence test\n")
	for _, s := range sets {
		items := make([]string, len(s.addrs))
		for i, a := range s.addrs {
			items[i] = fmt.Sprintf("{weight: 1, rrdatas: [%s]}", a)
		}
		hc := ""
		if s.check != "" {
			hc = "healthCheck: " + s.check + ", "
		}
		fmt.Fprintf(&b, "- {name: %s, type: A, ttl: 30, routingPolicy: {%swrr: {items: [%s]}}}\n", s.name, hc, strings.Join(items, ", "))
	}
	if len(sets) == 0 {
		b.WriteString("[]\n")
	}
	return b.String()
}

// seqRand draws the steps.
type seqRand struct{ *rand.Rand }

func (r seqRand) addrs(max int) []string {
	n := 1 + r.IntN(max)
	p := r.Perm(len(seqTargets))[:n]
	out := make([]string, n)
	for i, j := range p {
		out[i] = seqTargets[j]
	}
	slices.Sort(out)
	return out
}

// check picks a check, most of the time one c defines: a check nobody defines makes a Corefile
// that must be refused.
func (r seqRand) check(c seqConfig) string {
	var defined []string
	for i, ch := range seqChecks {
		if c.checks[i] {
			defined = append(defined, ch.name)
		}
	}
	if len(defined) == 0 || r.IntN(10) == 0 {
		return seqChecks[r.IntN(len(seqChecks))].name
	}
	return defined[r.IntN(len(defined))]
}

// mutate changes one thing of c.
func (r seqRand) mutate(c seqConfig) (seqConfig, string) {
	c = c.clone()
	switch r.IntN(6) {
	case 0:
		i := r.IntN(len(seqChecks))
		c.checks[i] = !c.checks[i]
		return c, fmt.Sprintf("check %s %s", seqChecks[i].name, map[bool]string{true: "added", false: "removed"}[c.checks[i]])
	case 1, 2:
		if len(c.inline) > 0 && r.IntN(3) == 0 {
			i := r.IntN(len(c.inline))
			name := c.inline[i].name
			c.inline = slices.Delete(c.inline, i, i+1)
			return c, "record set " + name + " removed"
		}
		s := seqSet{name: fmt.Sprintf("in%d.%s", 1+r.IntN(4), seqZone), addrs: r.addrs(3)}
		if r.IntN(5) > 0 {
			s.check = r.check(c)
		}
		c.inline = slices.DeleteFunc(c.inline, func(o seqSet) bool { return o.name == s.name })
		c.inline = append(c.inline, s)
		return c, fmt.Sprintf("record set %s = %v checked by %q", s.name, s.addrs, s.check)
	case 3:
		if len(c.lbs) > 0 && r.IntN(2) == 0 {
			i := r.IntN(len(c.lbs))
			vip := c.lbs[i].vip
			c.lbs = slices.Delete(c.lbs, i, i+1)
			return c, "load balancer " + vip + " removed"
		}
		lb := seqLB{vip: fmt.Sprintf("10.77.1.%d", 1+r.IntN(3)), check: r.check(c), backends: r.addrs(3)}
		c.lbs = slices.DeleteFunc(c.lbs, func(o seqLB) bool { return o.vip == lb.vip })
		c.lbs = append(c.lbs, lb)
		return c, fmt.Sprintf("load balancer %s = %v checked by %s", lb.vip, lb.backends, lb.check)
	case 4:
		if len(c.comps) > 0 && r.IntN(2) == 0 {
			i := r.IntN(len(c.comps))
			n := c.comps[i].n
			c.comps = slices.Delete(c.comps, i, i+1)
			return c, fmt.Sprintf("composite sq-k%d removed", n)
		}
		k := seqComp{n: 1 + r.IntN(3), check: r.check(c), backends: r.addrs(3)}
		c.comps = slices.DeleteFunc(c.comps, func(o seqComp) bool { return o.n == k.n })
		c.comps = append(c.comps, k)
		return c, fmt.Sprintf("composite sq-k%d over %v checked by %s", k.n, k.backends, k.check)
	default:
		c.dryRun = !c.dryRun
		return c, fmt.Sprintf("dry_run %v", c.dryRun)
	}
}

// fileSets draws the content of a record-set file, with checks c defines.
func (r seqRand) fileSets(c seqConfig) []seqSet {
	var out []seqSet
	for i := range 3 {
		if r.IntN(3) == 0 {
			continue
		}
		s := seqSet{name: fmt.Sprintf("f%d.%s", i+1, seqZone), addrs: r.addrs(3)}
		for _, j := range r.Perm(len(seqChecks)) {
			if c.checks[j] && r.IntN(4) > 0 {
				s.check = seqChecks[j].name
				break
			}
		}
		out = append(out, s)
	}
	return out
}

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
	file := filepath.Join(t.TempDir(), "recordsets.yaml")
	fileVersion := 0
	writeFile := func(body string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		fileVersion++
		when := time.Unix(1_700_000_000+int64(fileVersion), 0)
		if err := os.Chtimes(file, when, when); err != nil {
			t.Fatal(err)
		}
	}
	metrics := "127.0.0.1:" + coretest.FreePort(t)
	url := "http://" + metrics + "/metrics"
	busyPort := coretest.FreePort(t)

	cfg := seqConfig{checks: [3]bool{true, true, false}}
	cfg.inline = []seqSet{{name: "in1." + seqZone, check: "sq-c1", addrs: []string{"127.0.77.1", "127.0.77.2"}}}
	var fileSets []seqSet
	writeFile(recordSetsFile(fileSets))
	s := coretest.Start(t, cfg.corefile(pt.port, metrics, file, "", ""))

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
		want := triples(cfg.pairs(fileSets))
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
		for k := range triples(c.pairs(fileSets)) {
			if st := states[k]; !st.named {
				st.allow++
			}
		}
	}
	settle()

	kinds := map[string]int{}
	broken := false // the record-set file has a syntax error: a Corefile cannot load
	for step = 1; step <= steps; step++ {
		switch n := r.IntN(100); {
		case n < 52: // a Corefile reload
			next, change := r.mutate(cfg)
			if r.IntN(3) == 0 {
				var more string
				next, more = r.mutate(next)
				change += "; " + more
			}
			what = "reload: " + change
			err := s.Reload(next.corefile(pt.port, metrics, file, "", ""))
			switch ok := next.valid(fileSets) && !broken; {
			case ok && err != nil:
				t.Fatalf("step %d (%s): a valid Corefile was refused: %v", step, what, err)
			case !ok && err == nil:
				t.Fatalf("step %d (%s): a Corefile naming an undefined check, or a broken file, was accepted", step, what)
			case ok:
				cfg = next
			}
		case n < 62: // a reload that fails after startup: its listener cannot bind
			next, change := r.mutate(cfg)
			what = "failed reload (busy port): " + change
			busy := holdPort(t, busyPort)
			err := s.Reload(next.corefile(pt.port, metrics, file, "", "busy.test:"+busyPort+" {\n\tbind 127.0.0.1\n\twhoami\n}\n"))
			busy()
			if err == nil {
				t.Fatalf("step %d (%s): a reload onto a busy port succeeded", step, what)
			}
			if next.valid(fileSets) && !broken {
				expose(next) // its instance started before its listener failed
			}
		case n < 72: // a reload that fails at setup
			next, change := r.mutate(cfg)
			extra := "\tnosuchdirective\n"
			if r.IntN(2) == 0 {
				extra = ""
				next.inline = append(next.inline, seqSet{name: "bad." + seqZone, addrs: []string{"x"}})
			}
			what = "failed reload (parse error): " + change
			if err := s.Reload(next.corefile(pt.port, metrics, file, extra, "")); err == nil {
				t.Fatalf("step %d (%s): a Corefile with a parse error was accepted", step, what)
			}
		case n < 92: // a record-set file rewrite (which repairs a broken one)
			next := r.fileSets(cfg)
			what = fmt.Sprintf("file rewrite: %v", next)
			before := counterValue(t, url, "coredns_routingpolicy_reloads_total", map[string]string{"zone": seqZone, "result": "success"})
			writeFile(recordSetsFile(next))
			waitFileReload(t, url, seqZone, "success", before)
			fileSets, broken = next, false
		default: // a file with a syntax error: the last good data stays
			what = "file with a syntax error"
			before := counterValue(t, url, "coredns_routingpolicy_reloads_total", map[string]string{"zone": seqZone, "result": "failure"})
			writeFile("- {name: broken\n")
			waitFileReload(t, url, seqZone, "failure", before)
			broken = true
		}
		kinds[strings.SplitN(what, ":", 2)[0]]++
		settle()
		seqCheckProbed(t, s, url, pt, cfg, fileSets, states, step, what)
		if step%seqSettle == 0 {
			probedAgain(t, pt, states)
		}
	}
	t.Logf("steps: %v", kinds)

	// Every named triple is probed once more, then nothing but the live configuration was.
	what = "end"
	probedAgain(t, pt, states)
	seqCheckProbed(t, s, url, pt, cfg, fileSets, states, step, what)

	dnsUDP, dnsTCP := s.UDP, s.TCP
	s.Stop()
	if got := scrape(t, "", "coredns_healthcheck_target_state"); len(got) != 0 {
		t.Errorf("target_state after shutdown: %v", got)
	}
	pt.close()
	// Left out of both counts, as not ours: the goroutine and listener of CoreDNS's prometheus
	// plugin that a failed reload's instance started (the surviving instance's OnRestartFailed
	// does not take them back), and the server's own DNS sockets that caddy hands from instance to
	// instance, of which a reload failing after startup leaves copies (CoreDNS with whoami alone
	// does the same).
	leakOpts = append(leakOpts, goleak.IgnoreAnyFunction(metricsServer))
	upstream := []string{dnsUDP, dnsTCP, metrics}
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

// holdPort listens on port of 127.0.0.1, UDP and TCP, until the returned function is called.
func holdPort(t *testing.T, port string) func() {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		pc.Close()
		t.Fatal(err)
	}
	return func() { pc.Close(); ln.Close() }
}

// seqCheckProbed checks the invariant of H-6 against cfg and fileSets, the live configuration.
func seqCheckProbed(t *testing.T, s *coretest.Server, url string, pt *probeTargets, cfg seqConfig, fileSets []seqSet, states map[probeKey]*tripleState, step int, what string) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("step %d (%s): %s\nCorefile model: %+v\nfile: %+v", step, what, fmt.Sprintf(format, args...), cfg, fileSets)
	}
	pairs := cfg.pairs(fileSets)
	sets := slices.Concat(cfg.inline, fileSets)

	// Every record set answers from its own addresses; asking also creates its answers_total.
	for _, set := range sets {
		m, err := s.Query(set.name, dns.TypeA)
		if err != nil {
			fail("%v", err)
		}
		if m.Rcode != dns.RcodeSuccess || len(m.Answer) == 0 {
			fail("%s: rcode %s, %d answers", set.name, dns.RcodeToString[m.Rcode], len(m.Answer))
		}
		for _, rr := range m.Answer {
			if a, ok := rr.(*dns.A); !ok || !slices.Contains(set.addrs, a.A.String()) {
				fail("%s answered %s, not one of %v", set.name, rr, set.addrs)
			}
		}
	}

	body := fetchMetrics(t, url)
	// The probe registry, exactly: one target_state series per probed (check, target) and per VIP.
	want := make([]string, 0, len(pairs)+len(cfg.lbs))
	var got []string
	for p := range pairs {
		want = append(want, p[0]+" "+addrPort(p[1], pt.port))
	}
	for _, lb := range cfg.lbs {
		want = append(want, " "+lb.vip)
	}
	for _, l := range parseSeries(t, body, "coredns_healthcheck_target_state") {
		if strings.HasPrefix(l["check"], "sq-") || strings.HasPrefix(l["target"], "10.77.") {
			got = append(got, l["check"]+" "+l["target"])
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		fail("target_state series %q, want %q", got, want)
	}

	// The other series belong to the live configuration.
	var checks []string
	for i, ch := range seqChecks {
		if cfg.checks[i] {
			checks = append(checks, ch.name)
		}
	}
	if got := prefixed(labelValues(parseSeries(t, body, "coredns_healthcheck_probes_total"), "check"), "sq-"); !slices.Equal(got, checks) {
		fail("probes_total checks %v, want %v", got, checks)
	}
	if got := prefixed(labelValues(parseSeries(t, body, "coredns_healthcheck_state_transitions_total"), "check"), "sq-"); len(got) > 0 && !isSubset(got, checks) {
		fail("state_transitions_total checks %v, defined %v", got, checks)
	}
	comps := make([]string, 0, len(cfg.comps))
	srcs := make([]string, 0, len(cfg.comps))
	for _, k := range cfg.comps {
		comps = append(comps, fmt.Sprintf("sq-k%d 10.77.2.%d", k.n, k.n))
		srcs = append(srcs, fmt.Sprintf("sq-s%d", k.n))
	}
	slices.Sort(comps)
	slices.Sort(srcs)
	var gotComps []string
	for _, l := range parseSeries(t, body, "coredns_pschealth_composite_state") {
		if strings.HasPrefix(l["composite"], "sq-") {
			gotComps = append(gotComps, l["composite"]+" "+l["destination"])
		}
	}
	slices.Sort(gotComps)
	if gotComps = slices.Compact(gotComps); !slices.Equal(gotComps, comps) {
		fail("composite_state series %v, want %v", gotComps, comps)
	}
	if got := prefixed(labelValues(parseSeries(t, body, "coredns_pschealth_source_state"), "source"), "sq-"); !slices.Equal(got, srcs) {
		fail("source_state sources %v, want %v", got, srcs)
	}
	var items []string
	names := make([]string, 0, len(sets))
	for _, set := range sets {
		names = append(names, set.name+"/A")
		for i := range set.addrs {
			items = append(items, fmt.Sprintf("%s/A %d", set.name, i))
		}
	}
	slices.Sort(items)
	slices.Sort(names)
	var gotItems, gotNames []string
	for _, l := range parseSeries(t, body, "coredns_routingpolicy_wrr_configured_share") {
		if l["zone"] == seqZone {
			gotItems = append(gotItems, l["name"]+" "+l["item"])
		}
	}
	for _, l := range parseSeries(t, body, "coredns_routingpolicy_answers_total") {
		if l["zone"] == seqZone {
			gotNames = append(gotNames, l["name"])
			if !slices.Contains(items, l["name"]+" "+l["item"]) {
				fail("answers_total has item %s %s, not configured", l["name"], l["item"])
			}
		}
	}
	slices.Sort(gotItems)
	slices.Sort(gotNames)
	if !slices.Equal(gotItems, items) {
		fail("wrr_configured_share items %v, want %v", gotItems, items)
	}
	if gotNames = slices.Compact(gotNames); !slices.Equal(gotNames, names) {
		fail("answers_total record sets %v, want %v", gotNames, names)
	}

	// What the targets see: nothing for what is not named beyond a round in flight when it was
	// released, and a recent probe for what has been named for a while.
	now := time.Now()
	for _, k := range slices.SortedFunc(maps.Keys(states), func(a, b probeKey) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) }) {
		st := states[k]
		n, last := pt.count(k)
		switch {
		case !st.named && n > st.base+st.allow:
			fail("%v is not named but got %d probes since (allowed %d)", k, n-st.base, st.allow)
		case st.named && now.Sub(st.since) >= seqFirst && !last.After(st.since):
			pt.waitProbe(t, k, st.since, seqLate) // its first probe
		case st.named && now.Sub(st.since) >= seqWindow && now.Sub(last) > seqWindow:
			pt.waitProbe(t, k, now.Add(-seqWindow), seqLate)
		}
	}
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
