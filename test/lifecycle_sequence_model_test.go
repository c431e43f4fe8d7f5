package test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"

	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// The model of the sequence test (lifecycle_sequence_test.go): what a Corefile of the sequence
// says, how it is rendered, and the random changes drawn from it. The record-set file is apart.

const (
	seqZone  = "seq.test."  // the first server block's routingpolicy zone (inline sets and the file)
	seqZone2 = "seq2.test." // the second server block's
	seqOB    = "corp.internal."
)

// seqTargets are the probed addresses; the last two answer 503, so verdicts differ.
var seqTargets = []string{"127.0.77.1", "127.0.77.2", "127.0.77.3", "127.0.77.4", "127.0.77.5", "127.0.77.6", "127.0.77.7", "127.0.77.8"}

// seqVIPs are the load balancers' VIPs, which record-set files also name as internal load
// balancers; seqDests are the composites' destinations (sq-kN has the N-th).
var (
	seqVIPs  = []string{"10.77.1.1", "10.77.1.2", "10.77.1.3"}
	seqDests = []string{"10.77.2.1", "10.77.2.2", "10.77.2.3"}
)

// seqChecks are the checks a Corefile may define, each with its prober regions and sources. The
// last one is defined in the second server block when there is one, so the first block's
// consumers want it across blocks.
var seqChecks = []struct {
	name    string
	regions [][2]string // region, source address
}{
	{"sq-c1", [][2]string{{"us-east1", "127.0.78.1"}, {"europe-west1", "127.0.78.2"}}},
	{"sq-c2", [][2]string{{"us-east1", "127.0.78.3"}}},
	{"sq-c3", [][2]string{{"us-east1", "127.0.78.1"}, {"europe-west1", "127.0.78.3"}}},
}

// seqEndpoints are the egress endpoints the second block's outbound may declare; seqResolvers
// are its targets (test resolvers, on one port).
var (
	seqEndpoints = [][3]string{{"sq-e1", "us-east1", "127.0.75.1"}, {"sq-e2", "europe-west1", "127.0.75.2"}, {"sq-e3", "us-east1", "127.0.75.3"}}
	seqResolvers = []string{"127.0.76.1", "127.0.76.2"}
)

type seqSet struct {
	name, check string // check may be empty: nothing probed
	addrs       []string
	ilbs        []string // load-balancer VIPs the set's items name (files only): derived, never probed
}

// answers returns every address the set may answer with, in item order.
func (s seqSet) answers() []string { return slices.Concat(s.addrs, s.ilbs) }

type seqLB struct {
	vip, check string
	backends   []string
	threshold  int
}

type seqComp struct {
	n        int // sq-kN over source sq-sN, destination seqDests[N-1]
	check    string
	backends []string
}

// seqConfig is what a Corefile of the sequence says.
type seqConfig struct {
	checks  [3]bool
	narrow  bool     // sq-c1 probes from its first region only
	inline  []seqSet // the first block's record sets
	lbs     []seqLB
	comps   []seqComp
	dryRun  bool
	block2  bool     // a second server block, with sq-c3's definition when defined
	inline2 []seqSet // its record sets
	eps     []int    // its outbound block's endpoints (indexes of seqEndpoints): none, no block
	targets []int    // and targets (indexes of seqResolvers)
}

func (c seqConfig) clone() seqConfig {
	c.inline = slices.Clone(c.inline)
	c.lbs = slices.Clone(c.lbs)
	c.comps = slices.Clone(c.comps)
	c.inline2 = slices.Clone(c.inline2)
	c.eps = slices.Clone(c.eps)
	c.targets = slices.Clone(c.targets)
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

// sets returns every record set c and file serve.
func (c seqConfig) sets(file []seqSet) []seqSet { return slices.Concat(c.inline, c.inline2, file) }

// valid reports whether a server can start from c with file: every check named is defined.
func (c seqConfig) valid(file []seqSet) bool {
	for _, s := range c.sets(file) {
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
	for _, s := range c.sets(file) {
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

// held returns the board keys c and file hold: the probed pairs, the unchecked addresses and VIPs
// the record sets serve, the load balancers' VIPs, the composites' destinations (dry run or not)
// and the outbound targets.
func (c seqConfig) held(file []seqSet) map[health.Key]bool {
	out := map[health.Key]bool{}
	for p := range c.pairs(file) {
		out[health.Key{Check: p[0], Addr: netip.MustParseAddr(p[1])}] = true
	}
	for _, s := range c.sets(file) {
		for _, a := range s.answers() {
			if s.check == "" || slices.Contains(s.ilbs, a) {
				out[health.Key{Addr: netip.MustParseAddr(a)}] = true
			}
		}
	}
	for _, lb := range c.lbs {
		out[health.Key{Addr: netip.MustParseAddr(lb.vip)}] = true
	}
	for _, k := range c.comps {
		out[health.Key{Addr: netip.MustParseAddr(seqDests[k.n-1])}] = true
	}
	if c.outbound() {
		for _, i := range c.targets {
			out[health.Key{Addr: netip.MustParseAddr(seqResolvers[i])}] = true
		}
	}
	return out
}

// outbound reports whether the second block has an outbound block.
func (c seqConfig) outbound() bool { return c.block2 && len(c.eps) > 0 }

// obPairs returns the "endpoint target" pairs of the outbound block, targets as IP:PORT.
func (c seqConfig) obPairs(port string) []string {
	var out []string
	if c.outbound() {
		for _, e := range c.eps {
			for _, r := range c.targets {
				out = append(out, seqEndpoints[e][0]+" "+seqResolvers[r]+":"+port)
			}
		}
	}
	slices.Sort(out)
	return out
}

// seqKeys is every board key the sequence may hold.
func seqKeys() []health.Key {
	addrs := slices.Concat(seqTargets, seqVIPs, seqDests, seqResolvers)
	out := make([]health.Key, 0, len(addrs)+len(seqChecks)*len(seqTargets))
	for _, a := range addrs {
		out = append(out, health.Key{Addr: netip.MustParseAddr(a)})
	}
	for _, ch := range seqChecks {
		for _, a := range seqTargets {
			out = append(out, health.Key{Check: ch.name, Addr: netip.MustParseAddr(a)})
		}
	}
	return out
}

// regions returns the prober regions of check i: region, source address.
func (c seqConfig) regions(i int) [][2]string {
	if i == 0 && c.narrow {
		return seqChecks[i].regions[:1]
	}
	return seqChecks[i].regions
}

// triples returns the (check, target, source) triples probes arrive as for c and file.
func (c seqConfig) triples(file []seqSet) map[probeKey]bool {
	out := map[probeKey]bool{}
	for p := range c.pairs(file) {
		for i, ch := range seqChecks {
			if ch.name != p[0] {
				continue
			}
			for _, r := range c.regions(i) {
				out[probeKey{check: p[0], target: p[1], source: r[1]}] = true
			}
		}
	}
	return out
}

// seqEnv is what the Corefiles of one run share: the probe targets' port, the prometheus
// listener, the record-set file and the resolvers' port.
type seqEnv struct {
	port                  uint16
	metrics, file, obPort string
}

// corefile renders c; extra is added inside the first server block, after is a server block of
// its own.
func (c seqConfig) corefile(env seqEnv, extra, after string) string {
	var b strings.Builder
	check := func(i int) {
		ch := seqChecks[i]
		fmt.Fprintf(&b, "\t\tcheck %s {\n\t\t\tprotocol http\n\t\t\tport %d\n\t\t\tpath /%s\n\t\t\tinterval 1s\n\t\t\ttimeout 500ms\n", ch.name, env.port, ch.name)
		for _, r := range c.regions(i) {
			fmt.Fprintf(&b, "\t\t\tprober %s %s\n", r[0], r[1])
		}
		b.WriteString("\t\t}\n")
	}
	fmt.Fprintf(&b, "seq.test:0 {\n\tbind 127.0.0.1\n\tprometheus %s\n%s\thealthcheck {\n", env.metrics, extra)
	for i := range seqChecks {
		if c.checks[i] && (i < 2 || !c.block2) {
			check(i)
		}
	}
	for _, lb := range c.lbs {
		fmt.Fprintf(&b, "\t\tloadbalancer %s {\n\t\t\tbackends %s\n\t\t\tcheck %s\n\t\t\tthreshold %d\n\t\t}\n", lb.vip, strings.Join(lb.backends, " "), lb.check, lb.threshold)
	}
	b.WriteString("\t}\n")
	if len(c.comps) > 0 {
		b.WriteString("\tpschealth {\n")
		for _, k := range c.comps {
			fmt.Fprintf(&b, "\t\tsource sq-s%d {\n\t\t\tbackends %s\n\t\t\tcheck %s\n\t\t}\n", k.n, strings.Join(k.backends, " "), k.check)
			fmt.Fprintf(&b, "\t\tcomposite sq-k%d {\n\t\t\tsources sq-s%d\n\t\t\tdestination %s\n\t\t}\n", k.n, k.n, seqDests[k.n-1])
		}
		if c.dryRun {
			b.WriteString("\t\tdry_run\n")
		}
		b.WriteString("\t}\n")
	}
	fmt.Fprintf(&b, "\troutingpolicy {\n\t\treload 1s\n\t\trecordsets %s\n", env.file)
	inlineSets(&b, c.inline, seqZone)
	b.WriteString("\t}\n}\n")
	if c.block2 {
		b.WriteString("seq2.test:0 {\n\tbind 127.0.0.1\n")
		if c.checks[2] {
			b.WriteString("\thealthcheck {\n")
			check(2)
			b.WriteString("\t}\n")
		}
		if len(c.inline2) > 0 {
			b.WriteString("\troutingpolicy {\n")
			inlineSets(&b, c.inline2, seqZone2)
			b.WriteString("\t}\n")
		}
		if c.outbound() {
			fmt.Fprintf(&b, "\toutbound %s {\n\t\tto", seqOB)
			for _, r := range c.targets {
				fmt.Fprintf(&b, " %s:%s", seqResolvers[r], env.obPort)
			}
			b.WriteString("\n\t\tprivate 127.0.0.0/8\n\t\ttimeout 1s\n")
			for _, e := range c.eps {
				fmt.Fprintf(&b, "\t\tendpoint %s\n", strings.Join(seqEndpoints[e][:], " "))
			}
			b.WriteString("\t}\n")
		}
		b.WriteString("\twhoami\n}\n")
	}
	b.WriteString(after)
	return b.String()
}

// inlineSets renders sets as routingpolicy wrr lines of zone.
func inlineSets(b *strings.Builder, sets []seqSet, zone string) {
	for _, s := range sets {
		items := make([]string, len(s.addrs))
		for i, a := range s.addrs {
			items[i] = "1=" + a
		}
		fmt.Fprintf(b, "\t\twrr %s A 30 %q", strings.TrimSuffix(s.name, "."+zone), strings.Join(items, ";"))
		if s.check != "" {
			fmt.Fprintf(b, " healthcheck %s", s.check)
		}
		b.WriteString("\n")
	}
}

// recordSetsFile renders file sets in the managed-DNS export format. A set naming load balancers
// lists its addresses as health-checked targets (external endpoints and internal load balancers,
// an item each); the others give rrdatas.
func recordSetsFile(sets []seqSet) string {
	var b strings.Builder
	b.WriteString("# record sets of the sequence test\n")
	for _, s := range sets {
		var items []string
		for _, a := range s.addrs {
			if len(s.ilbs) > 0 {
				items = append(items, fmt.Sprintf("{weight: 1, healthCheckedTargets: {externalEndpoints: [%s]}}", a))
			} else {
				items = append(items, fmt.Sprintf("{weight: 1, rrdatas: [%s]}", a))
			}
		}
		for _, v := range s.ilbs {
			items = append(items, fmt.Sprintf("{weight: 1, healthCheckedTargets: {internalLoadBalancers: [{ipAddress: %s}]}}", v))
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

// pick returns n distinct elements of from, 1 <= n <= max, sorted.
func (r seqRand) pick(from []string, max int) []string {
	n := 1 + r.IntN(max)
	p := r.Perm(len(from))[:n]
	out := make([]string, n)
	for i, j := range p {
		out[i] = from[j]
	}
	slices.Sort(out)
	return out
}

func (r seqRand) addrs(max int) []string { return r.pick(seqTargets, max) }

// indexes returns n distinct indexes below size, 1 <= n <= size, sorted.
func (r seqRand) indexes(size int) []int {
	p := r.Perm(size)[:1+r.IntN(size)]
	slices.Sort(p)
	return p
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
	switch r.IntN(10) {
	case 9:
		c.narrow = !c.narrow
		return c, fmt.Sprintf("%s probes from %d regions", seqChecks[0].name, len(c.regions(0)))
	case 0:
		i := r.IntN(len(seqChecks))
		c.checks[i] = !c.checks[i]
		return c, fmt.Sprintf("check %s %s", seqChecks[i].name, map[bool]string{true: "added", false: "removed"}[c.checks[i]])
	case 1, 2:
		sets, zone, block := &c.inline, seqZone, "first"
		if c.block2 && r.IntN(2) == 0 {
			sets, zone, block = &c.inline2, seqZone2, "second"
		}
		if len(*sets) > 0 && r.IntN(3) == 0 {
			i := r.IntN(len(*sets))
			name := (*sets)[i].name
			*sets = slices.Delete(*sets, i, i+1)
			return c, "record set " + name + " removed"
		}
		s := seqSet{name: fmt.Sprintf("in%d.%s", 1+r.IntN(4), zone), addrs: r.addrs(3)}
		if r.IntN(5) > 0 {
			s.check = r.check(c)
		}
		*sets = slices.DeleteFunc(*sets, func(o seqSet) bool { return o.name == s.name })
		*sets = append(*sets, s)
		return c, fmt.Sprintf("record set %s (%s block) = %v checked by %q", s.name, block, s.addrs, s.check)
	case 3:
		if len(c.lbs) > 0 && r.IntN(2) == 0 {
			i := r.IntN(len(c.lbs))
			vip := c.lbs[i].vip
			c.lbs = slices.Delete(c.lbs, i, i+1)
			return c, "load balancer " + vip + " removed"
		}
		lb := seqLB{vip: seqVIPs[r.IntN(len(seqVIPs))], check: r.check(c), backends: r.addrs(3), threshold: []int{20, 60, 100}[r.IntN(3)]}
		c.lbs = slices.DeleteFunc(c.lbs, func(o seqLB) bool { return o.vip == lb.vip })
		c.lbs = append(c.lbs, lb)
		return c, fmt.Sprintf("load balancer %s = %v checked by %s, threshold %d%%", lb.vip, lb.backends, lb.check, lb.threshold)
	case 4:
		if len(c.comps) > 0 && r.IntN(2) == 0 {
			i := r.IntN(len(c.comps))
			n := c.comps[i].n
			c.comps = slices.Delete(c.comps, i, i+1)
			return c, fmt.Sprintf("composite sq-k%d removed", n)
		}
		k := seqComp{n: 1 + r.IntN(len(seqDests)), check: r.check(c), backends: r.addrs(3)}
		c.comps = slices.DeleteFunc(c.comps, func(o seqComp) bool { return o.n == k.n })
		c.comps = append(c.comps, k)
		return c, fmt.Sprintf("composite sq-k%d over %v checked by %s", k.n, k.backends, k.check)
	case 5:
		c.dryRun = !c.dryRun
		return c, fmt.Sprintf("dry_run %v", c.dryRun)
	case 6:
		if c.block2 {
			c.block2, c.inline2, c.eps, c.targets = false, nil, nil, nil
			return c, "second block removed"
		}
		c.block2 = true
		if r.IntN(2) == 0 {
			c.eps, c.targets = r.indexes(len(seqEndpoints)), r.indexes(len(seqResolvers))
		}
		return c, fmt.Sprintf("second block added, outbound endpoints %v targets %v", c.eps, c.targets)
	default:
		c.block2 = true
		switch {
		case len(c.eps) > 0 && r.IntN(3) == 0:
			c.targets = r.indexes(len(seqResolvers))
		case len(c.eps) > 1 && r.IntN(2) == 0:
			c.eps = slices.Delete(c.eps, 0, 1)
		default:
			c.eps = r.indexes(len(seqEndpoints))
			if len(c.targets) == 0 {
				c.targets = r.indexes(len(seqResolvers))
			}
		}
		return c, fmt.Sprintf("outbound endpoints %v targets %v", c.eps, c.targets)
	}
}

// fileSets draws the content of a record-set file, with checks c defines. A checked set may also
// name load balancers' VIPs as internal load balancers.
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
		if s.check != "" && r.IntN(3) == 0 {
			s.ilbs = r.pick(seqVIPs, 2)
		}
		out = append(out, s)
	}
	return out
}
