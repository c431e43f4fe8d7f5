package routingpolicy_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
)

// TestParityWithFile is the differential test of R-ZONE-1 and R-ZONE-2: one server process serves
// the same generated zone file through CoreDNS's file (one server block and port) and through
// routingpolicy zonefile (another), and both get the same questions. Rcode, AA and the answer
// section must be equal; authority and additional too, except for the differences README.md lists
// ("Differences from file"), each accepted here exactly where it applies.
//
// CI runs the seeds below; ROUTINGPOLICY_PARITY_SEEDS=N runs N more, from 1000.
func TestParityWithFile(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	if v := os.Getenv("ROUTINGPOLICY_PARITY_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			t.Fatalf("ROUTINGPOLICY_PARITY_SEEDS=%q: want a number of seeds", v)
		}
		for i := range n {
			seeds = append(seeds, 1000+uint64(i))
		}
	}
	total := 0
	for _, seed := range seeds {
		total += paritySeed(t, seed)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d seeds, %d questions, answers equal up to the documented differences", len(seeds), total)
}

const parityOrigin = "example.org."

// paritySeed generates the zone of seed, serves it both ways and compares every answer. It
// returns the number of questions asked.
func paritySeed(t *testing.T, seed uint64) int {
	t.Helper()
	g := newZoneGen(seed)
	g.generate()
	dir := t.TempDir()
	path := filepath.Join(dir, "db.example.org")
	text := g.text()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	// example.net, served by file in both server blocks, is where the zone's CNAMEs and DNAMEs
	// out of the zone lead: both plugins look those names up through the server (chase.go).
	netPath := filepath.Join(dir, "db.example.net")
	netText := g.netZone()
	if err := os.WriteFile(netPath, []byte(netText), 0o600); err != nil {
		t.Fatal(err)
	}
	text += "; example.net, in both server blocks:\n" + netText
	p1, p2 := coretest.FreePort(t), coretest.FreePort(t)
	corefile := fmt.Sprintf(`example.org:%s example.net:%s {
	bind 127.0.0.1
	file %s example.org
	file %s example.net
}
example.org:%s example.net:%s {
	bind 127.0.0.1
	routingpolicy example.org {
		zonefile %s
		reload 0
	}
	file %s example.net
}`, p1, p1, path, netPath, p2, p2, path, netPath)
	s, err := coretest.New(corefile)
	if err != nil {
		t.Fatalf("seed %d: the server did not start: %v\nzone:\n%s", seed, err, text)
	}
	defer s.Stop()
	fileAddr, rpAddr := "127.0.0.1:"+p1, "127.0.0.1:"+p2
	c := &dns.Client{}
	qs := g.questions()
	for _, q := range qs {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		m.SetEdns0(4096, q.do)
		want, _, err := c.Exchange(m, fileAddr)
		if err != nil {
			t.Fatalf("seed %d: %s %s to file: %v", seed, q.name, dns.TypeToString[q.qtype], err)
		}
		got, _, err := c.Exchange(m, rpAddr)
		if err != nil {
			t.Fatalf("seed %d: %s %s to routingpolicy: %v", seed, q.name, dns.TypeToString[q.qtype], err)
		}
		if diff := g.compare(q, want, got); diff != "" {
			t.Fatalf("seed %d: question %s %s (DO %v): %s\nfile:\n%v\nroutingpolicy:\n%v\nzone:\n%s",
				seed, q.name, dns.TypeToString[q.qtype], q.do, diff, want, got, text)
		}
	}
	return len(qs)
}

type question struct {
	name  string
	qtype uint16
	do    bool // asked with the DO bit (RFC 3225): referrals carry the cut's DS
}

// zoneGen writes a random zone: plain data, zone cuts with glue and occluded data, wildcards at
// several depths with names and empty non-terminals blocking them, a DNAME, CNAME chains in and
// out of the zone, mixed case. CNAMEs only point at names that end a chain or at earlier CNAMEs,
// so the zone never loops (a loop is a load error for routingpolicy).
type zoneGen struct {
	r      *rand.Rand
	rrs    []dns.RR
	seen   map[string]bool
	owners map[string]map[uint16]bool // canonical owner → types
	// terminals are names with data that is not a CNAME, not under a cut or DNAME.
	terminals []string
	cnames    []string
	cuts      []string
	wilds     []string
	dnames    []string
	soaMin    uint32
	soaTTL    uint32
}

func newZoneGen(seed uint64) *zoneGen {
	return &zoneGen{
		r:      rand.New(rand.NewPCG(seed, 0x5eed)),
		seen:   map[string]bool{},
		owners: map[string]map[uint16]bool{},
	}
}

func (g *zoneGen) fq(rel string) string {
	if rel == "@" || rel == "" {
		return parityOrigin
	}
	return rel + "." + parityOrigin
}

func (g *zoneGen) pick(s []string) string { return s[g.r.IntN(len(s))] }

// add adds one record given in master-file syntax, owner fully qualified.
func (g *zoneGen) add(s string) {
	rr, err := dns.NewRR(s)
	if err != nil {
		panic(fmt.Sprintf("generator wrote %q: %v", s, err))
	}
	key := strings.ToLower(rr.String())
	if g.seen[key] {
		return
	}
	g.seen[key] = true
	g.rrs = append(g.rrs, rr)
	name := strings.ToLower(rr.Header().Name)
	if g.owners[name] == nil {
		g.owners[name] = map[uint16]bool{}
	}
	g.owners[name][rr.Header().Rrtype] = true
}

func (g *zoneGen) generate() {
	g.soaTTL = 3600
	g.soaMin = []uint32{30, 300, 86400}[g.r.IntN(3)]
	g.add(fmt.Sprintf("%s %d IN SOA ns1.%s hostmaster.%s 1 7200 1800 1209600 %d", parityOrigin, g.soaTTL, parityOrigin, parityOrigin, g.soaMin))
	g.add(fmt.Sprintf("%s 3600 IN NS ns1.%s", parityOrigin, parityOrigin))
	g.add(fmt.Sprintf("%s 3600 IN NS ns2.example.net.", parityOrigin))
	g.add(fmt.Sprintf("ns1.%s 3600 IN A 192.0.2.53", parityOrigin))
	if g.r.IntN(2) == 0 {
		g.add(fmt.Sprintf("ns1.%s 3600 IN AAAA 2001:db8::53", parityOrigin))
	}
	g.terminals = append(g.terminals, g.fq("ns1"))
	if g.r.IntN(2) == 0 {
		g.add(fmt.Sprintf("%s 300 IN A 192.0.2.1", parityOrigin))
		g.add(fmt.Sprintf(`%s 300 IN TXT "apex"`, parityOrigin))
	}

	// Plain data at depths 1..3.
	// Labels with a dot or a space in them are written escaped (`x\.y`), as on the wire.
	pool := []string{"www", "mail", "api", "web", "a", "b", "c", `x\.y`, `my\ printer`}
	for i := range 8 + g.r.IntN(10) {
		depth := 1 + g.r.IntN(3)
		labels := make([]string, depth)
		for j := range labels {
			labels[j] = g.pick(pool)
		}
		name := g.fq(strings.Join(labels, "."))
		g.addData(name, i)
		g.terminals = append(g.terminals, name)
	}
	// Zone cuts: in-bailiwick name servers with glue, an out-of-zone one, sometimes a sibling,
	// a DS, and occluded data below.
	for i := range 1 + g.r.IntN(3) {
		cut := g.fq(fmt.Sprintf("sub%d", i))
		if g.r.IntN(3) == 0 {
			cut = g.fq(fmt.Sprintf("sub%d.%s", i, g.pick(pool)))
		}
		g.cuts = append(g.cuts, cut)
		g.add(fmt.Sprintf("%s 3600 IN NS ns.%s", cut, cut))
		g.add(fmt.Sprintf("ns.%s 3600 IN A 192.0.2.%d", cut, 100+i))
		if g.r.IntN(2) == 0 {
			g.add(fmt.Sprintf("ns.%s 3600 IN AAAA 2001:db8::%d", cut, 100+i))
		}
		g.add(fmt.Sprintf("%s 3600 IN NS ns.example.net.", cut))
		if g.r.IntN(2) == 0 {
			g.add(fmt.Sprintf("%s 3600 IN NS ns1.%s", cut, parityOrigin))
		}
		if g.r.IntN(2) == 0 {
			g.add(fmt.Sprintf("%s 3600 IN DS 12345 13 2 %064x", cut, g.r.Uint64()))
		}
		if g.r.IntN(2) == 0 {
			g.add(fmt.Sprintf("www.%s 300 IN A 192.0.2.%d", cut, 110+i))
			g.add(fmt.Sprintf(`deep.x.%s 300 IN TXT "occluded"`, cut))
		}
	}
	// A DNAME to an in-zone subtree without CNAMEs, or out of the zone.
	if g.r.IntN(2) == 0 {
		dn := g.fq("dn")
		g.dnames = append(g.dnames, dn)
		if g.r.IntN(2) == 0 {
			g.add(fmt.Sprintf("%s 300 IN DNAME %s", dn, g.mixCase("example.net.")))
		} else {
			tgt := g.fq("dtarget")
			g.add(fmt.Sprintf("%s 300 IN DNAME %s", dn, g.mixCase(tgt))) // file keeps its case
			g.add(fmt.Sprintf("www.%s 300 IN A 192.0.2.60", tgt))
			g.add(fmt.Sprintf(`x.%s 300 IN TXT "dtarget"`, tgt))
			g.terminals = append(g.terminals, "www."+tgt, "x."+tgt)
		}
		g.add(fmt.Sprintf(`%s 300 IN TXT "dname owner"`, dn))
	}
	// Wildcards at several depths, blocked by names and empty non-terminals below their parent.
	for i := range 1 + g.r.IntN(4) {
		var base string
		switch g.r.IntN(4) {
		case 0:
			base = g.fq(fmt.Sprintf("wild%d", i))
		case 1:
			base = g.fq(fmt.Sprintf("x.y.wild%d", i))
		case 2:
			base = g.pick(g.terminals)
		default:
			base = parityOrigin
		}
		w := "*." + base
		if g.owners[w] != nil {
			continue
		}
		g.wilds = append(g.wilds, w)
		switch k := g.r.IntN(5); {
		case k == 0 && base != parityOrigin:
			// A wildcard CNAME ends a chain: its target is never a CNAME.
			g.add(fmt.Sprintf("%s 300 IN CNAME %s", w, g.mixCase(g.chainEnd())))
		case k == 1:
			g.add(fmt.Sprintf("%s 300 IN MX 10 %s", w, g.mixCase(g.pick(g.terminals))))
		default:
			g.add(fmt.Sprintf("%s 300 IN A 192.0.2.%d", w, 70+i))
			g.add(fmt.Sprintf(`%s 300 IN TXT "wild %d"`, w, i))
		}
		if g.r.IntN(2) == 0 {
			g.add(fmt.Sprintf("real.%s 300 IN A 192.0.2.%d", base, 80+i))
			g.add(fmt.Sprintf(`leaf.ent.%s 300 IN TXT "under an ent"`, base))
		}
	}
	// A wildcard that is itself an empty non-terminal.
	if g.r.IntN(3) == 0 {
		w := g.fq("*.wildent")
		g.wilds = append(g.wilds, w)
		g.add(fmt.Sprintf("a.%s 300 IN A 192.0.2.90", w))
	}
	// A long chain, past file's limit of 10 CNAMEs, sometimes through a wildcard (which starts
	// file's count again): long0 → long1 → … → a name that ends a chain.
	if g.r.IntN(2) == 0 {
		n := 8 + g.r.IntN(8)
		wild := -1
		if g.r.IntN(2) == 0 {
			wild = g.r.IntN(n - 1)
			g.wilds = append(g.wilds, g.fq("*.lwild"))
			g.add(fmt.Sprintf("%s 300 IN CNAME %s", g.fq("*.lwild"), g.fq(fmt.Sprintf("long%d", wild+1))))
		}
		for i := range n {
			target := g.fq(fmt.Sprintf("long%d", i+1))
			switch i {
			case wild:
				target = g.fq(fmt.Sprintf("w%d.lwild", g.r.IntN(10)))
			case n - 1:
				target = g.chainEnd()
			}
			g.add(fmt.Sprintf("%s 300 IN CNAME %s", g.fq(fmt.Sprintf("long%d", i)), g.mixCase(target)))
			g.cnames = append(g.cnames, g.fq(fmt.Sprintf("long%d", i)))
		}
	}
	// The other half of the loop through example.net (netZone).
	if g.r.IntN(2) == 0 {
		g.add(fmt.Sprintf("loop.%s 300 IN CNAME %s", parityOrigin, g.mixCase("loop.example.net.")))
	}
	// CNAMEs: to names that end a chain, or to an earlier CNAME.
	for i := range 1 + g.r.IntN(4) {
		owner := g.fq(fmt.Sprintf("alias%d", i))
		if g.r.IntN(3) == 0 {
			owner = g.fq(fmt.Sprintf("alias%d.c", i))
		}
		target := g.chainEnd()
		if len(g.cnames) > 0 && g.r.IntN(3) == 0 {
			target = g.pick(g.cnames)
		}
		g.add(fmt.Sprintf("%s 300 IN CNAME %s", g.mixCase(owner), g.mixCase(target)))
		g.cnames = append(g.cnames, owner)
	}
}

// addData adds one to three record sets of plain types at name.
func (g *zoneGen) addData(name string, i int) {
	for range 1 + g.r.IntN(3) {
		switch g.r.IntN(5) {
		case 0:
			g.add(fmt.Sprintf("%s 300 IN A 192.0.2.%d", name, 1+i))
			if g.r.IntN(2) == 0 {
				g.add(fmt.Sprintf("%s 300 IN A 198.51.100.%d", name, 1+i))
			}
		case 1:
			g.add(fmt.Sprintf("%s 300 IN AAAA 2001:db8::%x", name, 1+i))
		case 2:
			g.add(fmt.Sprintf(`%s 300 IN TXT "t%d" "Mixed Case"`, name, i))
		case 3:
			mx := "mail.example.net."
			if len(g.terminals) > 0 && g.r.IntN(3) > 0 {
				mx = g.pick(g.terminals)
			}
			g.add(fmt.Sprintf("%s 300 IN MX 10 %s", name, g.mixCase(mx)))
			g.add(fmt.Sprintf("%s 300 IN MX 20 %s", name, g.mixCase(g.fq("nomx"))))
		case 4:
			tgt := "sip.example.net."
			if len(g.terminals) > 0 && g.r.IntN(2) == 0 {
				tgt = g.pick(g.terminals)
			}
			g.add(fmt.Sprintf("_sip._tcp.%s 300 IN SRV 10 5 5060 %s", name, tgt))
		}
	}
}

// chainEnd returns a name a CNAME chain ends at: data, a name that does not exist, a name
// under a cut or a DNAME, or a name out of the zone.
func (g *zoneGen) chainEnd() string {
	switch g.r.IntN(6) {
	case 0:
		return fmt.Sprintf("nx%d.%s", g.r.IntN(100), parityOrigin)
	case 1:
		if len(g.cuts) > 0 {
			return "www." + g.pick(g.cuts)
		}
	case 2:
		if len(g.dnames) > 0 {
			return "www." + g.pick(g.dnames)
		}
	case 3:
		// Out of the zone, into example.net (netZone): data, a name that does not exist, a
		// CNAME back into this zone, a CNAME loop through both zones.
		return g.pick([]string{"target.example.net.", "www.example.net.", "nx.example.net.", "back.example.net.", "loop.example.net."})
	}
	return g.pick(g.terminals)
}

// netZone is example.net, where the zone's names out of the zone lead: addresses and text, a
// name that does not exist, back.example.net, a CNAME back to a name of this zone, and
// loop.example.net, a CNAME to loop.example.org, which leads back to it (a loop through the
// server that file and routingpolicy both end at the 9th pass, SERVFAIL).
func (g *zoneGen) netZone() string {
	back := g.pick(g.terminals)
	if len(g.cnames) > 0 && g.r.IntN(2) == 0 {
		back = g.pick(g.cnames)
	}
	return `example.net. 3600 IN SOA ns.example.net. hostmaster.example.net. 1 7200 1800 1209600 300
example.net. 3600 IN NS ns.example.net.
ns.example.net. 3600 IN A 192.0.2.200
ns2.example.net. 3600 IN A 192.0.2.201
target.example.net. 300 IN A 198.51.100.10
target.example.net. 300 IN TXT "target"
mail.example.net. 300 IN A 198.51.100.11
sip.example.net. 300 IN AAAA 2001:db8::11
www.example.net. 300 IN A 198.51.100.12
back.example.net. 300 IN CNAME ` + g.mixCase(back) + `
loop.example.net. 300 IN CNAME loop.example.org.
`
}

func (g *zoneGen) mixCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' && g.r.IntN(4) == 0 {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// text is the zone file: records in random order, owners in mixed case, owners and in-zone
// targets with some octets written as escapes (RFC 1035 5.1: `\097` or `\a` for `a`, `\042` or
// `\*` for the wildcard label), which name the same names as their plain spelling.
func (g *zoneGen) text() string {
	var b strings.Builder
	// The SOA first, as file wants.
	b.WriteString(g.rrs[0].String() + "\n")
	rest := slices.Clone(g.rrs[1:])
	g.r.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	for _, rr := range rest {
		c := dns.Copy(rr)
		h := c.Header()
		h.Name = g.mixCase(h.Name)
		if h.Rrtype != dns.TypeSRV {
			// file keeps SRV owners as written and then misses the empty non-terminals above
			// an escaped one (README, Differences from file).
			h.Name = g.escape(h.Name, parityOrigin)
		}
		// Targets file looks up in its tree (MX, SRV, NS) are escaped in their first label:
		// file compares the others with a cut's labels as written. CNAME and DNAME targets are
		// not: file asks itself again for the names they lead to, as written, and that lookup
		// compares labels as written (README, Differences from file).
		switch v := c.(type) {
		case *dns.MX:
			v.Mx = g.escapeFirst(v.Mx)
		case *dns.SRV:
			v.Target = g.escapeFirst(v.Target)
		case *dns.NS:
			v.Ns = g.escapeFirst(v.Ns)
		}
		b.WriteString(c.String() + "\n")
	}
	return b.String()
}

// escape writes some octets of the labels of name above suffix as escapes. Labels of suffix
// stay as they are: file compares them as written when it decides what is in the zone.
func (g *zoneGen) escape(name, suffix string) string {
	if !dns.IsSubDomain(suffix, name) || strings.EqualFold(name, suffix) {
		return name
	}
	rel := name[:len(name)-len(suffix)]
	var b strings.Builder
	for i := 0; i < len(rel); i++ {
		c := rel[i]
		switch {
		case c == '\\':
			// An escape already: copy it whole (\DDD or \c).
			n := 2
			if i+3 < len(rel) && isDigit(rel[i+1]) && isDigit(rel[i+2]) && isDigit(rel[i+3]) {
				n = 4
			}
			b.WriteString(rel[i : i+n])
			i += n - 1
		case c == '*' && i == 0:
			b.WriteString([]string{"*", `\*`, `\042`}[g.r.IntN(3)])
		case ('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') && g.r.IntN(6) == 0:
			if g.r.IntN(2) == 0 {
				fmt.Fprintf(&b, `\%03d`, c)
			} else {
				b.WriteString(`\` + string(c))
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String() + name[len(rel):]
}

// escapeFirst escapes some octets of the first label of an in-zone name.
func (g *zoneGen) escapeFirst(name string) string {
	if !dns.IsSubDomain(parityOrigin, name) || strings.EqualFold(name, parityOrigin) {
		return name
	}
	return g.escape(name, parentName(name))
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// ents returns the empty non-terminals: ancestors of owners without records of their own.
func (g *zoneGen) ents() []string {
	var out []string
	seen := map[string]bool{}
	for name := range g.owners {
		for p := parentName(name); p != "" && dns.IsSubDomain(parityOrigin, p) && p != parityOrigin; p = parentName(p) {
			if g.owners[p] == nil && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out
}

func parentName(name string) string {
	i, end := dns.NextLabel(name, 0)
	if end {
		return ""
	}
	return name[i:]
}

var parityTypes = []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT, dns.TypeMX, dns.TypeSRV, dns.TypeCNAME,
	dns.TypeNS, dns.TypeDS, dns.TypeSOA, dns.TypeDNAME}

// questions asks about every name of the zone and around it.
func (g *zoneGen) questions() []question {
	var qs []question
	ask := func(name string, types ...uint16) {
		for _, t := range types {
			qs = append(qs, question{name: g.mixCase(name), qtype: t})
		}
	}
	some := func() []uint16 {
		return []uint16{g.pick16(parityTypes), g.pick16(parityTypes)}
	}
	owners := make([]string, 0, len(g.owners))
	for o := range g.owners {
		owners = append(owners, o)
	}
	slices.Sort(owners)
	for _, o := range owners {
		for t := range g.owners[o] {
			ask(o, t)
		}
		ask(o, some()...)
	}
	for _, e := range g.ents() {
		ask(e, dns.TypeA, dns.TypeTXT)
		ask("nx."+e, dns.TypeA)
	}
	for _, w := range g.wilds {
		base := w[2:]
		ask("match"+strconv.Itoa(g.r.IntN(1000))+"."+base, dns.TypeA, dns.TypeTXT, dns.TypeMX, dns.TypeAAAA)
		ask("x.y.z."+base, dns.TypeA, dns.TypeCNAME)
		ask("real."+base, dns.TypeA, dns.TypeTXT)
		ask("ent."+base, dns.TypeA, dns.TypeTXT)
		ask("below.ent."+base, dns.TypeA)
		ask("below.real."+base, dns.TypeA)
	}
	for _, c := range g.cuts {
		ask(c, dns.TypeNS, dns.TypeDS, dns.TypeA, dns.TypeSOA)
		ask("x."+c, dns.TypeA, dns.TypeDS, dns.TypeNS)
		ask("ns."+c, dns.TypeA, dns.TypeAAAA)
		ask("deep.x."+c, dns.TypeTXT)
	}
	for _, d := range g.dnames {
		ask(d, dns.TypeDNAME, dns.TypeA, dns.TypeTXT)
		ask("www."+d, dns.TypeA, dns.TypeCNAME, dns.TypeDNAME)
		ask("a.b."+d, dns.TypeTXT)
		ask("x."+d, dns.TypeTXT)
	}
	ask(parityOrigin, dns.TypeNS, dns.TypeSOA, dns.TypeA, dns.TypeMX, dns.TypeDS)
	for range 40 {
		base := g.pick(owners)
		ask(fmt.Sprintf("r%d.%s", g.r.IntN(10000), base), g.pick16(parityTypes))
	}
	// A third of the questions with the DO bit, and every question about a cut once more with it.
	n := len(qs)
	for i := range n {
		if qs[i].do = g.r.IntN(3) == 0; !qs[i].do && g.underCut(qs[i].name) {
			qs = append(qs, question{name: qs[i].name, qtype: qs[i].qtype, do: true})
		}
	}
	return qs
}

// underCut reports whether name is at or below one of the zone cuts.
func (g *zoneGen) underCut(name string) bool {
	for _, c := range g.cuts {
		if dns.IsSubDomain(c, strings.ToLower(name)) {
			return true
		}
	}
	return false
}

func (g *zoneGen) pick16(s []uint16) uint16 { return s[g.r.IntN(len(s))] }

// isENTUnderWildcard reports whether name is an empty non-terminal whose parent has a wildcard.
func (g *zoneGen) isENTUnderWildcard(name string) bool {
	name = strings.ToLower(name)
	return g.owners[name] == nil && slices.Contains(g.ents(), name) && slices.Contains(g.wilds, "*."+parentName(name))
}

// compare returns what differs between file's answer (want) and ours (got), after the differences
// README.md lists, or "".
func (g *zoneGen) compare(q question, want, got *dns.Msg) string {
	// Difference 3 (RFC 4592 2.2.2): an empty non-terminal exists, so a wildcard beside it does
	// not synthesize it; file does. The answer up to that name is the same, then NODATA.
	last := strings.ToLower(q.name)
	if n := len(got.Answer); n > 0 {
		if c, ok := got.Answer[n-1].(*dns.CNAME); ok {
			last = strings.ToLower(c.Target)
		}
	}
	if g.isENTUnderWildcard(last) && got.Rcode == dns.RcodeSuccess && isNegative(got) && want.Authoritative == got.Authoritative {
		wantAnswer := want.Answer
		if i := slices.IndexFunc(want.Answer, func(rr dns.RR) bool { return strings.EqualFold(rr.Header().Name, last) }); i >= 0 {
			wantAnswer = want.Answer[:i]
		}
		return diffSection("answer", wantAnswer, got.Answer)
	}
	if want.Rcode != got.Rcode {
		return fmt.Sprintf("rcode %s, file %s", dns.RcodeToString[got.Rcode], dns.RcodeToString[want.Rcode])
	}
	if want.Authoritative != got.Authoritative {
		return fmt.Sprintf("AA %v, file %v", got.Authoritative, want.Authoritative)
	}
	if d := diffSection("answer", want.Answer, got.Answer); d != "" {
		return d
	}
	wantNs := negTTL(want.Ns)
	// Difference 2 (RFC 2308 2.2): a CNAME chain that ends at a name without the type is NODATA
	// and carries the SOA; file gives the apex NS set when it found the last name in its tree, and
	// on NS queries.
	if len(got.Answer) > 0 && isNegative(got) && isApexNS(want.Ns) {
		if _, ok := got.Answer[len(got.Answer)-1].(*dns.CNAME); ok {
			return diffSection("additional", noOPT(want.Extra), noOPT(got.Extra))
		}
	}
	// Difference 4 (RFC 1034 4.3.2 3b): a CNAME chain that leads under a zone cut ends in a
	// referral. file loses it when it resolved an earlier step through its upstream (a name it
	// synthesizes, or any step of an NS query) and answers with the apex NS set or NODATA.
	if len(got.Answer) > 0 && g.isReferralFor(got, last) && (isApexNS(want.Ns) || isNegative(want)) && len(noOPT(want.Extra)) == 0 {
		// Ours is the cut's referral: its glue is the cut's in-domain glue.
		return diffSection("additional (the referral's glue)", g.glueOf(strings.ToLower(got.Ns[0].Header().Name)), noOPT(got.Extra))
	}
	if d := diffSection("authority", wantNs, got.Ns); d != "" {
		return d
	}
	return diffSection("additional", noOPT(want.Extra), noOPT(got.Extra))
}

// negTTL returns file's authority section with difference 1 applied (RFC 2308 3): a negative
// answer's SOA has the TTL min(SOA TTL, MINIMUM).
func negTTL(ns []dns.RR) []dns.RR {
	out := slices.Clone(ns)
	for i, rr := range out {
		if soa, ok := rr.(*dns.SOA); ok {
			c := dns.Copy(soa).(*dns.SOA)
			c.Hdr.Ttl = min(c.Hdr.Ttl, c.Minttl)
			out[i] = c
		}
	}
	return out
}

// isReferralFor reports whether m's authority is the NS set of a zone cut at or above name.
func (g *zoneGen) isReferralFor(m *dns.Msg, name string) bool {
	if len(m.Ns) == 0 {
		return false
	}
	cut := strings.ToLower(m.Ns[0].Header().Name)
	for _, rr := range m.Ns {
		// The NS set, then for a DO query the cut's DS set (RFC 4035 3.1.4).
		if t := rr.Header().Rrtype; t != dns.TypeNS && t != dns.TypeDS || !strings.EqualFold(rr.Header().Name, cut) {
			return false
		}
	}
	return slices.Contains(g.cuts, cut) && dns.IsSubDomain(cut, name)
}

// glueOf returns the glue of the zone cut at cut: the A and AAAA records of its name servers that
// are at or below it (in-domain glue, RFC 9471), as the generator wrote them.
func (g *zoneGen) glueOf(cut string) []dns.RR {
	var out []dns.RR
	for _, ns := range g.rrs {
		v, ok := ns.(*dns.NS)
		if !ok || !strings.EqualFold(v.Hdr.Name, cut) || !dns.IsSubDomain(cut, strings.ToLower(v.Ns)) {
			continue
		}
		for _, rr := range g.rrs {
			if t := rr.Header().Rrtype; (t == dns.TypeA || t == dns.TypeAAAA) && strings.EqualFold(rr.Header().Name, v.Ns) {
				out = append(out, rr)
			}
		}
	}
	return out
}

// isNegative reports whether m's authority is the SOA alone.
func isNegative(m *dns.Msg) bool {
	return len(m.Ns) == 1 && m.Ns[0].Header().Rrtype == dns.TypeSOA
}

func isApexNS(ns []dns.RR) bool {
	if len(ns) == 0 {
		return false
	}
	for _, rr := range ns {
		if rr.Header().Rrtype != dns.TypeNS || !strings.EqualFold(rr.Header().Name, parityOrigin) {
			return false
		}
	}
	return true
}

func noOPT(rrs []dns.RR) []dns.RR {
	return slices.DeleteFunc(slices.Clone(rrs), func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeOPT })
}

// diffSection compares two sections as multisets of records, exactly but for the owner names of
// SRV records, which file keeps as written and we answer in lower case (README, Differences from
// file; RFC 4343).
// The answer section is compared in order too, RRset by RRset (rrsetOrder).
func diffSection(section string, want, got []dns.RR) string {
	w, g := canon(want), canon(got)
	if !slices.Equal(w, g) {
		return fmt.Sprintf("%s differs:\n  file:           %v\n  routingpolicy:  %v", section, w, g)
	}
	if strings.HasPrefix(section, "answer") {
		if wo, gotOrder := rrsetOrder(want), rrsetOrder(got); !slices.Equal(wo, gotOrder) {
			return fmt.Sprintf("%s in another order:\n  file:           %v\n  routingpolicy:  %v", section, wo, gotOrder)
		}
	}
	return ""
}

// rrsetOrder returns the owner and type of each run of records of one RRset in rrs, in the order
// they stand: a chain is answered link by link, each CNAME before what it points at (RFC 1034
// 4.3.2), while the records of one RRset have no order (RFC 2181 5).
func rrsetOrder(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		k := strings.ToLower(rr.Header().Name) + "/" + dns.TypeToString[rr.Header().Rrtype]
		if len(out) == 0 || out[len(out)-1] != k {
			out = append(out, k)
		}
	}
	return out
}

func canon(rrs []dns.RR) []string {
	out := make([]string, 0, len(rrs))
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeSRV {
			rr = dns.Copy(rr)
			rr.Header().Name = strings.ToLower(rr.Header().Name)
		}
		out = append(out, rr.String())
	}
	slices.Sort(out)
	return out
}
