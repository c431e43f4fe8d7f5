package routingpolicy

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/readme"
	"github.com/coresteer/coresteer/plugin/pkg/region"

	"github.com/miekg/dns"
)

// FuzzParseData: the routing-policy data-string parser never panics; what it accepts has
// non-empty keys and rdata, and round-trips: printed back (formatData) and parsed again it gives
// the same items.
func FuzzParseData(f *testing.F) {
	for _, s := range []string{
		"1=10.0.0.1;2=10.0.0.2,10.0.0.3", "us-east1=a;europe-west2=b", ";;", "=", "1=,", "a=b=c", "1=10 mx.example.org.",
		"0=10.0.0.1;0=10.0.0.2", " 1 = 10.0.0.1 , 10.0.0.2 ; ", "1000=\"v=spf1 -all\"", "us-east1=10.0.1.1;europe-west2=10.0.2.1",
		"1=10 0 53 srv.example.org.", "asia-east1=2001:db8::1,2001:db8::2",
	} {
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
		again, err := parseData(formatData(items))
		if err != nil || !reflect.DeepEqual(again, items) {
			t.Fatalf("%q -> %q -> %+v, %v; want %+v", s, formatData(items), again, err, items)
		}
	})
}

// formatData prints items in the form parseData reads.
func formatData(items []dataItem) string {
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = it.key + "=" + strings.Join(it.rdata, ",")
	}
	return strings.Join(parts, ";")
}

// FuzzRecordSets: the file loader never panics on any JSON or YAML, and what it loads answers
// queries for every record set, at and below its name, with the properties of a loaded zone
// (checkAnswer, R-ZONE-3). The committed corpus (testdata/fuzz/FuzzRecordSets) holds the shapes
// that once panicked (more than 128 items), a loop through a policy, wildcards, cuts and DNAMEs.
func FuzzRecordSets(f *testing.F) {
	for _, name := range []string{"testdata/export.json", "testdata/export.yaml", "testdata/export-stream.yaml"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"rrsets": []}`))
	f.Add([]byte(`- name: x.`))
	// The built-in regions and r0..r299, so that a geo policy can have more items than maxItems,
	// each at its own location (seed failover-backup-300-items).
	var cfg region.Config
	cfg.Coords = make(map[string]region.Coord, 300)
	for i := range 300 {
		cfg.Coords["r"+strconv.Itoa(i)] = region.Coord{Lat: float64(i%180 - 90), Lon: float64(i%360 - 180)}
	}
	loc, err := cfg.Build()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rrs, sets, _, err := parseRecordSets(b, "fuzz")
		if err != nil {
			return
		}
		d, err := build([]string{"."}, loc, testSource(rrs), sets, fixedNow)
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
		d, err := build([]string{"example.org."}, loc, testSource(rrs), nil, fixedNow)
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

// FuzzZoneFileRoundTrip: the records of any zone file that loads, printed in their
// presentation form (dns.RR.String) and parsed again, are the same records: the canonical form
// of a loaded zone is a zone file that loads to it. (Of a file that parses but does not load,
// nothing is promised: `a A` with no address at the end of a file parses, prints as a line that
// does not, and is refused by build; TestZoneFileEmptyRdata.)
func FuzzZoneFileRoundTrip(f *testing.F) {
	for _, s := range zoneFileSeeds {
		f.Add([]byte(s))
	}
	loc := mustLocator(f)
	f.Add([]byte("$ORIGIN example.org.\n$TTL 60\n@ SOA ns1 h 1 2 3 4 5\ntxt TXT \"a b\" \"c\\\"d\" \"\\255\"\nmx MX 10 a\nsrv SRV 1 2 53 a\naaaa AAAA 2001:db8::1\ncaa CAA 0 issue \"ca.example.net\"\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rrs, err := parseZoneFile(b, "fuzz", "example.org.")
		if err != nil {
			return
		}
		if _, err := build([]string{"example.org."}, loc, testSource(copyRRs(rrs)), nil, fixedNow); err != nil {
			return
		}
		var text strings.Builder
		for _, rr := range rrs {
			text.WriteString(rr.String() + "\n")
		}
		again, err := parseZoneFile([]byte(text.String()), "fuzz", "example.org.")
		if err != nil {
			t.Fatalf("%q printed as\n%s\ndoes not parse: %v", b, text.String(), err)
		}
		if len(again) != len(rrs) {
			t.Fatalf("%d records printed as\n%s\nparse as %d", len(rrs), text.String(), len(again))
		}
		for i := range rrs {
			if again[i].String() != rrs[i].String() {
				t.Fatalf("%q printed and parsed again is %q", rrs[i].String(), again[i].String())
			}
		}
	})
}

// askAll asks d, through ServeDNS, every type of qtypes at every name and one label below it,
// plainly and with EDNS0 and the name in upper case, and checks every answer: written as packed
// bytes, it is the message WriteMsg sends (bothWays), and it has the properties of checkAnswer.
func askAll(t *testing.T, d *data, loc *region.Locator, names []string, qtypes ...uint16) {
	t.Helper()
	rp := New(&Config{Zones: []string{"."}, Locator: loc}, d)
	rp.rnd = rand.New(rand.NewPCG(1, 2)).Uint64
	client := &net.UDPAddr{IP: net.ParseIP("10.1.1.1"), Port: 40212}
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
				for _, edns := range []bool{false, true} {
					m := new(dns.Msg)
					m.SetQuestion(q, qt)
					if edns {
						m.Question[0].Name = upperASCII(q)
						m.SetEdns0(1232, true)
					}
					wire, _ := bothWays(t, rp, m, client)
					if wire == nil {
						continue // not ours (no zone matches): passed on
					}
					a := new(dns.Msg)
					if err := a.Unpack(wire); err != nil {
						t.Fatalf("%s %s: the answer does not unpack: %v", q, dns.TypeToString[qt], err)
					}
					checkAnswer(t, d, m, a)
				}
			}
		}
	}
}

// upperASCII returns name with its ASCII letters in upper case, its other octets as they are.
func upperASCII(name string) string {
	b := []byte(name)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
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

// fuzzZone is the zone of FuzzServeDNS and a seed of FuzzParse: every policy kind, with and
// without fencing, trickle and health checks, a record set at the limit of 128 items, cuts,
// wildcards, DNAME, CNAME into a policy.
var fuzzZone = `routingpolicy example.org {
		public
		region us-east1
		subnet europe-west2 10.2.0.0/16
		record alias CNAME 60 www
		record sub NS 60 ns.sub
		record ns.sub A 60 192.0.2.1
		record *.wild A 60 192.0.2.2
		record *.cwild CNAME 60 www
		record dn DNAME 60 example.net.
		record txt TXT 60 "two words" x
		record @ MX 60 10 mail
		wrr *.app A 60 "1=10.0.0.3;1=10.0.0.4"
		wrr www A 60 "1=10.0.0.1;0=10.0.0.2"
		wrr zero AAAA 60 "0=2001:db8::1;0=2001:db8::2"
		wrr many A 60 "` + manyWRR(maxItems) + `"
		wrr mx MX 60 "1=10 mail.example.org.;2=20 mail2.example.org."
		geo geo A 60 "us-east1=10.0.1.1;europe-west2=10.0.2.1" fence
		geo geotxt TXT 60 "us-east1=east;europe-west2=west"
		failover fo A 60 "10.0.0.1" "us-east1=10.0.1.1" trickle 0.5
		failover fo2 A 60 "10.0.0.1,10.0.0.2" "us-east1=10.0.1.1;asia-east1=10.0.3.1" fence trickle 1
	}`

// manyWRR is the data of a WRR set with n items of weight 1.
func manyWRR(n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf("1=10.1.%d.%d", i/250, i%250+1)
	}
	return strings.Join(items, ";")
}

// copyRRs copies rrs: build normalizes the headers of the records it is given.
func copyRRs(rrs []dns.RR) []dns.RR {
	out := make([]dns.RR, len(rrs))
	for i, rr := range rrs {
		out[i] = dns.Copy(rr)
	}
	return out
}

// TestZoneFileCutLastLine: R-ZONE-3, found by FuzzZoneFileRoundTrip (corpus entries
// empty-rdata-at-eof and mx-no-exchange-at-eof): a zone file whose last line is cut short, with no
// newline after it (`www MX`), parsed into a record with empty fields (an MX 0 with no exchange,
// served as a null MX; an A with no address), which printed as a line that does not parse, and
// the MX loaded. It is refused as the same line is anywhere else in the file. The corpus entry
// FuzzZoneFile/raw-octets-owner ended the same way and now gives its CNAME a target.
func TestZoneFileCutLastLine(t *testing.T) {
	for _, in := range []string{"$ORIGIN 000000000\n$TTL 0\n000 A ", "$TTL 0\n0 MX ", "$TTL 60\nwww AAAA", "$TTL 60\nwww SRV 1"} {
		rrs, err := parseZoneFile([]byte(in), "fuzz", "example.org.")
		if err != nil {
			continue
		}
		// miekg/dns takes some types with no rdata even mid-file (`www AAAA`): build refuses
		// those (packable).
		if _, err := build([]string{"example.org."}, mustLocator(t), testSource(rrs), nil, fixedNow); err == nil {
			t.Errorf("%q loaded as %v, want an error", in, rrs)
		}
	}
	// A last line that is whole still loads without its newline.
	rrs, err := parseZoneFile([]byte("$TTL 60\nwww MX 10 mail"), "fuzz", "example.org.")
	if err != nil || len(rrs) != 1 || rrs[0].(*dns.MX).Mx != "mail.example.org." {
		t.Fatalf("a whole last line: %v, %v", rrs, err)
	}
}

// TestZoneOwnerTooLong: R-ZONE-3, found by FuzzZoneFileRoundTrip (corpus entry
// owner-256-octets-no-rdata): an owner name of 256 octets loaded, since miekg/dns packs it, and
// with it an A record with no address, since packable's check for missing rdata could not read
// the name back. Both are refused, the name first.
func TestZoneOwnerTooLong(t *testing.T) {
	owner := strings.Repeat("0", 59) + "." + strings.Repeat("0", 63) + "." + strings.Repeat("0", 63) + "." + strings.Repeat("0", 54)
	// The entry's own input (no address, on the last line) is refused by the parser now, as
	// the same line anywhere else, with the parser's error naming the line.
	if _, err := parseZoneFile([]byte("$TTL 60\n"+owner+" A"), "fuzz", "example.org."); err == nil || !strings.Contains(err.Error(), "at line: 2:") {
		t.Errorf("an A record without an address on the last line: %v", err)
	}
	for _, in := range []string{"$TTL 60\n" + owner + " A 192.0.2.1", "$TTL 60\n" + owner + " A 192.0.2.1\n"} {
		rrs, err := parseZoneFile([]byte(in), "fuzz", "example.org.")
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		_, err = build([]string{"example.org."}, mustLocator(t), testSource(rrs), nil, fixedNow)
		if err == nil || !strings.Contains(err.Error(), "longer than 255 octets") {
			t.Errorf("%q: %v, want an error about the owner's length", in, err)
		}
	}
}

// TestZoneRdataNameTooLong: R-ZONE-3, found by FuzzZoneFileRoundTrip (corpus entry
// cname-target-over-255-octets): a relative CNAME target that the origin makes longer than 255
// octets loaded (miekg/dns packs it) and was served as a record no resolver can read.
func TestZoneRdataNameTooLong(t *testing.T) {
	target := strings.Repeat("0", 51) + "." + strings.Repeat("0", 63) + "." + strings.Repeat("0", 63) + "." + strings.Repeat("0", 52)
	rrs, err := parseZoneFile([]byte("$ORIGIN 00000000000\n$TTL 0\n0 CNAME "+target), "fuzz", "example.org.")
	if err != nil {
		t.Fatal(err)
	}
	_, err = build([]string{"example.org."}, mustLocator(t), testSource(rrs), nil, fixedNow)
	if err == nil || !strings.Contains(err.Error(), "cannot be read back") {
		t.Fatalf("%v, want an error about a record that cannot be read back", err)
	}
}

// FuzzServeDNS: any query a server accepts, to a zone with every policy kind, gets one reply
// (coretest.Serve) that packs and unpacks, has the query's ID and question and an rcode a zone
// answers with (coretest.CheckReply), and is what a loaded zone may answer (checkAnswer,
// R-ZONE-3).
func FuzzServeDNS(f *testing.F) {
	rp, _ := newTest(f, fuzzZone)
	rp.Next = coretest.Echo
	for i, q := range []struct {
		name  string
		qtype uint16
	}{
		{"www.example.org.", dns.TypeA}, {"alias.example.org.", dns.TypeA}, {"x.sub.example.org.", dns.TypeA},
		{"a.b.wild.example.org.", dns.TypeA}, {"x.cwild.example.org.", dns.TypeA}, {"x.dn.example.org.", dns.TypeA},
		{"x.app.example.org.", dns.TypeA}, {"geo.example.org.", dns.TypeANY}, {"x.fo.example.org.", dns.TypeAAAA},
		{"many.example.org.", dns.TypeA}, {"MaNy.ExAmPlE.oRg.", dns.TypeA}, {"zero.example.org.", dns.TypeAAAA},
		{"mx.example.org.", dns.TypeMX}, {"geotxt.example.org.", dns.TypeTXT}, {"fo2.example.org.", dns.TypeA},
		{"example.org.", dns.TypeAXFR}, {"example.org.", dns.TypeSOA}, {"nx.example.org.", dns.TypeA},
		{"other.net.", dns.TypeA},
	} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		m.SetEdns0(1232, true)
		if i >= 9 {
			// A client subnet (L-1), and one with a cookie.
			o := m.IsEdns0()
			o.Option = append(o.Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 20, Address: net.ParseIP("10.2.63.9").To4()})
			if i == 11 {
				o.Option = append(o.Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"})
			}
		}
		b, _ := m.Pack()
		f.Add(b)
	}
	ecs := new(dns.Msg)
	ecs.SetQuestion("geo.example.org.", dns.TypeA)
	ecs.SetEdns0(1232, false)
	ecs.IsEdns0().Option = append(ecs.IsEdns0().Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.IPv4(10, 2, 3, 0)})
	b, _ := ecs.Pack()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		q, m := coretest.FuzzServe(t, rp, b, "10.2.3.4", dns.RcodeSuccess, dns.RcodeNameError, dns.RcodeServerFailure, dns.RcodeYXDomain, dns.RcodeRefused)
		if m != nil && (m.Authoritative || m.Rcode == dns.RcodeNameError) {
			checkAnswer(t, rp.data.Load(), q, m)
		}
	})
}

// FuzzParse: a routingpolicy block either fails to parse with an error that says where
// (Testfile:LINE, the line of the property), or gives configurations whose inline data either
// fails to load or loads into zones that answer every name they hold with the properties of a
// loaded zone (checkAnswer, R-ZONE-3). Seeds: every README example and a zone with every kind.
func FuzzParse(f *testing.F) {
	blocks, err := readme.Directive("README.md", "routingpolicy")
	if err != nil || len(blocks) == 0 {
		f.Fatalf("README blocks: %v", err)
	}
	for _, s := range append(blocks, fuzzZone,
		"routingpolicy example.org {\nzonefile db.example.org\nrecordsets rs.yaml\nreload 0\nfallthrough\nlog\n}",
		"routingpolicy 10.in-addr.arpa {\nwrr 1.0.0 TXT 60 \"1=hello\"\n}",
		"routingpolicy {\nwrr www A 60 \"1=10.0.0.1\"\ngeo www A 60 \"us-east1=10.0.0.2\"\n}",
		"routingpolicy example.org {\ncoordinates edge 1.5 2.5\nsubnet edge 10.9.0.0/16\ngeo g A 60 \"edge=10.0.0.1;us-east1=10.0.0.2\"\n}",
		"routingpolicy example.org {\nrecord a CNAME 60 b\nrecord b CNAME 60 a\n}",
	) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		c := caddy.NewTestController("dns", in)
		c.ServerBlockKeys = []string{"example.org."}
		cfgs, err := parse(c)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "Testfile:") {
				t.Fatalf("%q: the error %q does not say where", in, err)
			}
			return
		}
		for _, cfg := range cfgs {
			if len(cfg.Zones) == 0 || cfg.Locator == nil {
				t.Fatalf("%q: parsed with no zone or no locator: %+v", in, cfg)
			}
			cfg.ZoneFile, cfg.RecordSets = "", "" // no files: the inline data
			d, err := cfg.load(fixedNow)
			if err != nil {
				continue
			}
			var names []string
			for _, s := range cfg.Sets {
				names = append(names, s.name)
			}
			for _, rr := range cfg.Records {
				names = append(names, rr.Header().Name)
			}
			askAll(t, d, cfg.Locator, names, dns.TypeA, dns.TypeAAAA, dns.TypeTXT, dns.TypeNS, dns.TypeCNAME)
		}
	})
}

// generated is the name go test -fuzz gives the inputs it finds.
var generated = regexp.MustCompile(`^[0-9a-f]{16}$`)

// TestFuzzSeedsReachQueryPath: R-ZONE-3: every seed and named corpus entry of FuzzZoneFile and
// FuzzRecordSets parses, so the target reaches build and the query path with it; one that the
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
			if generated.MatchString(filepath.Base(f)) {
				continue // found by the fuzzer (make fuzz): it may well not parse
			}
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
