package routingpolicy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coresteer/coresteer/plugin/pkg/region"

	"github.com/miekg/dns"
)

// FuzzParseData: the routing-policy data-string parser never panics, and what it accepts has
// non-empty keys and rdata.
func FuzzParseData(f *testing.F) {
	for _, s := range []string{"1=10.0.0.1;2=10.0.0.2,10.0.0.3", "us-east1=a;europe-west2=b", ";;", "=", "1=,", "a=b=c", "1=10 mx.example.org."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		items, err := parseData(s)
		if err != nil {
			return
		}
		for _, it := range items {
			if it.key == "" || len(it.rdata) == 0 {
				t.Fatalf("accepted an empty key or rdata: %q -> %+v", s, items)
			}
		}
	})
}

// FuzzRecordSets: the file loader never panics on any JSON or YAML, and what it loads answers
// queries for every record set, at and below its name, with the properties of a loaded zone
// (checkAnswer, R-ZONE-3). The committed corpus (testdata/fuzz/FuzzRecordSets) holds the shapes
// that once panicked (more than 128 items), a loop through a policy, wildcards, cuts and DNAMEs.
func FuzzRecordSets(f *testing.F) {
	for _, name := range []string{"testdata/export.json", "testdata/export.yaml"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"rrsets": []}`))
	f.Add([]byte(`- name: x.`))
	loc := mustLocator(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		rrs, sets, _, err := parseRecordSets(b, "fuzz")
		if err != nil {
			return
		}
		d, err := build([]string{"."}, loc, rrs, sets, fixedNow)
		if err != nil {
			return
		}
		names := make([]string, 0, len(sets)+len(rrs))
		for _, s := range sets {
			names = append(names, s.name)
		}
		for _, rr := range rrs {
			names = append(names, rr.Header().Name)
		}
		askAll(t, d, loc, names, dns.TypeA, dns.TypeNS, dns.TypeCNAME)
	})
}

// zoneFileSeeds are the seeds of FuzzZoneFile: cuts, wildcards, DNAMEs, escapes, a chain past
// file's limit, and loops the loader refuses (with checkLoops stubbed out, the target fails on
// them). Every one has a $TTL, so it parses and reaches the query path
// (TestFuzzSeedsReachQueryPath).
var zoneFileSeeds = []string{
	"$ORIGIN example.org.\n$TTL 60\n@ SOA ns1 h 1 2 3 4 5\nsub NS ns.sub\nns.sub A 192.0.2.1\n*.w A 192.0.2.2\na.*.e TXT x\n",
	"$ORIGIN example.org.\n$TTL 60\na CNAME b.w\n*.w CNAME c\nc MX 10 a\ndn DNAME t\nx.t A 192.0.2.3\n",
	"$ORIGIN example.org.\n$TTL 60\n@ DNAME example.net.\n@ NS ns.example.net.\n* A 192.0.2.4\n",
	"$ORIGIN example.org.\n$TTL 60\n\\097bc A 192.0.2.5\n\\042.esc CNAME \\097bc\nx\\046y CNAME sub.x.y\nsub.x.y NS ns.example.net.\n",
	"$ORIGIN example.org.\n$TTL 60\nc0 CNAME c1\nc1 CNAME c2\nc2 CNAME c3\nc3 CNAME c4\nc4 CNAME c5\nc5 CNAME c6\nc6 CNAME c7\nc7 CNAME c8\nc8 CNAME c9\nc9 CNAME c10\nc10 CNAME x.w\n*.w CNAME c11\nc11 A 192.0.2.6\n",
	// Loops: refused at load.
	"$ORIGIN example.org.\n$TTL 60\na CNAME b\nb CNAME a\n",
	"$ORIGIN example.org.\n$TTL 60\na CNAME x.w\n*.w CNAME a\n",
	"$ORIGIN example.org.\n$TTL 60\nd DNAME e.example.org.\ne DNAME d.example.org.\n",
	"$ORIGIN example.org.\n$TTL 60\n" + longOwner("a") + " DNAME " + longOwner("b") + "\n" + longOwner("b") + " DNAME " + longOwner("a") + "\n",
}

// longOwner is a name of 250 octets in example.org., made of c.
func longOwner(c string) string {
	l63 := strings.Repeat(c, 63)
	return l63 + "." + l63 + "." + l63 + "." + strings.Repeat(c, 44) + ".example.org."
}

// FuzzZoneFile: any zone file that loads answers queries at, below and beside its names with the
// properties of a loaded zone (checkAnswer, R-ZONE-3): cuts, wildcards, DNAMEs, escapes and
// CNAME chains included.
func FuzzZoneFile(f *testing.F) {
	for _, s := range zoneFileSeeds {
		f.Add([]byte(s))
	}
	loc := mustLocator(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		rrs, err := parseZoneFile(b, "fuzz", "example.org.")
		if err != nil {
			return
		}
		d, err := build([]string{"example.org."}, loc, rrs, nil, fixedNow)
		if err != nil {
			return
		}
		names := make([]string, 0, len(rrs))
		for _, rr := range rrs {
			names = append(names, rr.Header().Name)
		}
		askAll(t, d, loc, names, dns.TypeA, dns.TypeNS, dns.TypeDS, dns.TypeCNAME, dns.TypeANY)
	})
}

// askAll asks d, through ServeDNS, every type of qtypes at every name and one label below it,
// and checks every answer.
func askAll(t *testing.T, d *data, loc *region.Locator, names []string, qtypes ...uint16) {
	t.Helper()
	rp := New(&Config{Zones: []string{"."}, Locator: loc}, d)
	rp.rnd = rand.New(rand.NewPCG(1, 2)).Uint64
	for _, name := range names {
		below := "x." + name
		if name == "." {
			below = "x."
		}
		for _, q := range []string{name, below} {
			if wireLen(q) > maxNameLen {
				continue
			}
			for _, qt := range qtypes {
				m := new(dns.Msg)
				m.SetQuestion(q, qt)
				rec := dnstest.NewRecorder(&test.ResponseWriter{})
				rp.ServeDNS(context.Background(), rec, m)
				checkAnswer(t, d, m, rec.Msg)
			}
		}
	}
}

// checkAnswer checks what every answer of a zone that loaded must be (R-ZONE-3: nothing that
// loads can mislead the query path): it packs; its question is the query's; no CNAME owner
// repeats (no loop survived the load); every answer record is owned by a name of the zone; it is
// authoritative unless it is a referral, whose NS owner is a zone cut at or above the name asked
// (the query name, or the last CNAME target).
func checkAnswer(t *testing.T, d *data, q, m *dns.Msg) {
	t.Helper()
	if m == nil {
		return // not ours (no zone matches): passed on
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s %s: %s\n%v", q.Question[0].Name, dns.TypeToString[q.Question[0].Qtype], fmt.Sprintf(format, args...), m)
	}
	if _, err := m.Pack(); err != nil {
		fail("the answer does not pack: %v", err)
	}
	if len(m.Question) != 1 || m.Question[0] != q.Question[0] {
		fail("the question is not the query's: %v", m.Question)
	}
	qname := canonicalName(q.Question[0].Name)
	z := d.match(qname)
	last := qname
	seen := map[string]bool{}
	for _, rr := range m.Answer {
		owner := canonicalName(rr.Header().Name)
		if !inZone(owner, z.origin) {
			fail("answer record %v is not in the zone %s", rr, z.origin)
		}
		if c, ok := rr.(*dns.CNAME); ok {
			if seen[owner] {
				fail("the CNAME of %s twice: a loop loaded", owner)
			}
			seen[owner] = true
			last = canonicalName(c.Target)
		}
	}
	referral := len(m.Ns) > 0 && m.Ns[0].Header().Rrtype == dns.TypeNS && canonicalName(m.Ns[0].Header().Name) != z.origin
	if referral {
		cut := canonicalName(m.Ns[0].Header().Name)
		if !inZone(last, cut) {
			fail("a referral to %s for %s, which is not at or below it", cut, last)
		}
	}
	if m.Authoritative == (referral && len(m.Answer) == 0) {
		fail("AA %v for a referral %v with %d answer records", m.Authoritative, referral, len(m.Answer))
	}
}

// FuzzServeDNS: any message to a zone with every policy kind gets an answer or an error, never a
// panic.
func FuzzServeDNS(f *testing.F) {
	rp, _ := newTest(f, `routingpolicy example.org {
		public
		region us-east1
		subnet europe-west2 10.2.0.0/16
		record alias CNAME 60 www
		record sub NS 60 ns.sub
		record ns.sub A 60 192.0.2.1
		record *.wild A 60 192.0.2.2
		record *.cwild CNAME 60 www
		record dn DNAME 60 example.net.
		wrr *.app A 60 "1=10.0.0.3;1=10.0.0.4"
		wrr www A 60 "1=10.0.0.1;0=10.0.0.2"
		geo geo A 60 "us-east1=10.0.1.1;europe-west2=10.0.2.1" fence
		failover fo A 60 "10.0.0.1" "us-east1=10.0.1.1" trickle 0.5
	}`)
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{"www.example.org.", dns.TypeA}, {"alias.example.org.", dns.TypeA}, {"x.sub.example.org.", dns.TypeA}, {"a.b.wild.example.org.", dns.TypeA}, {"x.cwild.example.org.", dns.TypeA}, {"x.dn.example.org.", dns.TypeA}, {"x.app.example.org.", dns.TypeA}, {"geo.example.org.", dns.TypeANY}, {"x.fo.example.org.", dns.TypeAAAA}} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		m.SetEdns0(1232, true)
		b, _ := m.Pack()
		f.Add(b)
	}
	f.Fuzz(func(_ *testing.T, b []byte) {
		m := new(dns.Msg)
		if m.Unpack(b) != nil || len(m.Question) != 1 {
			return
		}
		rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: "10.2.3.4"})
		rp.ServeDNS(context.Background(), rec, m)
	})
}

// TestFuzzSeedsReachQueryPath: R-ZONE-3: every seed and committed corpus entry of FuzzZoneFile
// and FuzzRecordSets parses, so the target reaches build and the query path with it; one that the
// parser refuses checks nothing. Regression: the zone-file seeds had no $TTL and all stopped at
// the parser.
func TestFuzzSeedsReachQueryPath(t *testing.T) {
	corpus := func(target string) map[string][]byte {
		out := map[string][]byte{}
		files, err := filepath.Glob(filepath.Join("testdata/fuzz", target, "*"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no committed corpus (%v)", target, err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(string(b), "\n")
			s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out[f] = []byte(s)
		}
		return out
	}
	zones := corpus("FuzzZoneFile")
	for i, s := range zoneFileSeeds {
		zones[fmt.Sprintf("seed %d", i)] = []byte(s)
	}
	for name, b := range zones {
		if _, err := parseZoneFile(b, "fuzz", "example.org."); err != nil {
			t.Errorf("FuzzZoneFile %s never reaches the query path: %v", name, err)
		}
	}
	for name, b := range corpus("FuzzRecordSets") {
		if _, _, _, err := parseRecordSets(b, "fuzz"); err != nil {
			t.Errorf("FuzzRecordSets %s never reaches the query path: %v", name, err)
		}
	}
}
