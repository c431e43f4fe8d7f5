package routingpolicy

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin/file"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	"github.com/miekg/dns"
)

// zoneBlock is a zone with an apex, a delegation, wildcards, a DNAME and a CNAME to each.
const zoneBlock = `routingpolicy example.org {
	record @ SOA 3600 ns1.example.org. admin.example.org. 1 7200 1800 86400 60
	record @ NS 3600 ns1.example.org.
	record @ NS 3600 ns.example.net.
	record ns1 A 300 192.0.2.53
	record ns1 AAAA 300 2001:db8::53
	record sub NS 3600 ns.sub
	record sub NS 3600 ns1
	record sub NS 3600 ns.example.net.
	record sub DS 3600 12345 13 2 49FD46E6C4B45C55D4AC69CBD3CD34AC1AFE51DE5E1F7F0D4E2C7BAE4B1A1B2C
	record ns.sub A 300 192.0.2.100
	record ns.sub AAAA 300 2001:db8::100
	record www.sub A 300 192.0.2.101
	record tosub CNAME 300 www.sub
	record *.wild A 300 192.0.2.1
	record *.wild TXT 300 "wild"
	record real.wild A 300 192.0.2.2
	record leaf.ent.wild A 300 192.0.2.3
	record *.x.y.deep MX 300 10 mail
	record mail A 300 192.0.2.25
	record mail AAAA 300 2001:db8::25
	record *.cwild CNAME 300 target
	record target A 300 192.0.2.9
	record a.*.wildent A 300 192.0.2.4
	record dn DNAME 300 target.example.org.
	record dn TXT 300 "owner"
	record x.target A 300 192.0.2.10
	record out DNAME 300 example.net.
	record mx MX 300 10 mail
	record mx MX 300 20 mail.example.net.
}`

type zoneCase struct {
	test.Case
	notAA bool
}

func checkZone(t *testing.T, block string, cases []zoneCase) {
	t.Helper()
	rp, _ := newTest(t, block)
	for _, tc := range cases {
		m := askMsg(t, rp, tc.Msg(), "10.1.1.1")
		// The OPT of a DO query's answer is not the zone's data.
		m.Extra = slices.DeleteFunc(m.Extra, func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeOPT })
		if m.Authoritative == tc.notAA {
			t.Errorf("%s %s: AA %v, want %v", tc.Qname, dns.TypeToString[tc.Qtype], m.Authoritative, !tc.notAA)
		}
		for _, sec := range [][]dns.RR{tc.Answer, tc.Ns, tc.Extra} {
			sort.Sort(test.RRSet(sec))
		}
		if err := test.SortAndCheck(m, tc.Case); err != nil {
			t.Errorf("%s %s: %v\n%v", tc.Qname, dns.TypeToString[tc.Qtype], err, m)
		}
	}
}

var (
	zSOA     = test.SOA("example.org. 60 IN SOA ns1.example.org. admin.example.org. 1 7200 1800 86400 60")
	zNS      = []dns.RR{test.NS("example.org. 3600 IN NS ns1.example.org."), test.NS("example.org. 3600 IN NS ns.example.net.")}
	zSubNS   = []dns.RR{test.NS("sub.example.org. 3600 IN NS ns.sub.example.org."), test.NS("sub.example.org. 3600 IN NS ns1.example.org."), test.NS("sub.example.org. 3600 IN NS ns.example.net.")}
	zSubGlue = []dns.RR{test.A("ns.sub.example.org. 300 IN A 192.0.2.100"), test.AAAA("ns.sub.example.org. 300 IN AAAA 2001:db8::100")}
)

// TestZoneDelegation: R-ZONE-2, RFC 1034 4.3.2: NS below the apex is a zone cut. Names at and
// under it get a referral without AA, the cut's NS set and the in-domain glue (not the sibling
// ns1, as file); DS at the cut is answered from this zone; data under the cut is occluded.
func TestZoneDelegation(t *testing.T) {
	ds := test.DS("sub.example.org. 3600 IN DS 12345 13 2 49FD46E6C4B45C55D4AC69CBD3CD34AC1AFE51DE5E1F7F0D4E2C7BAE4B1A1B2C")
	checkZone(t, zoneBlock, []zoneCase{
		{Case: test.Case{Qname: "sub.example.org.", Qtype: dns.TypeNS, Ns: zSubNS, Extra: zSubGlue}, notAA: true},
		{Case: test.Case{Qname: "sub.example.org.", Qtype: dns.TypeA, Ns: zSubNS, Extra: zSubGlue}, notAA: true},
		{Case: test.Case{Qname: "www.sub.example.org.", Qtype: dns.TypeA, Ns: zSubNS, Extra: zSubGlue}, notAA: true},
		{Case: test.Case{Qname: "ns.sub.example.org.", Qtype: dns.TypeA, Ns: zSubNS, Extra: zSubGlue}, notAA: true},
		{Case: test.Case{Qname: "a.b.sub.example.org.", Qtype: dns.TypeDS, Ns: zSubNS, Extra: zSubGlue}, notAA: true},
		{Case: test.Case{Qname: "sub.example.org.", Qtype: dns.TypeDS, Answer: []dns.RR{ds}, Ns: zNS}},
		// A CNAME into the delegation: the CNAME, authoritative, then the referral.
		{Case: test.Case{Qname: "tosub.example.org.", Qtype: dns.TypeA,
			Answer: []dns.RR{test.CNAME("tosub.example.org. 300 IN CNAME www.sub.example.org.")}, Ns: zSubNS, Extra: zSubGlue}},
		// With the DO bit a referral carries the cut's DS set after its NS set (RFC 4035 3.1.4),
		// as file's does; the dnssec plugin signs it.
		{Case: test.Case{Qname: "www.sub.example.org.", Qtype: dns.TypeA, Do: true, Ns: append(slices.Clone(zSubNS), ds), Extra: zSubGlue}, notAA: true},
		{Case: test.Case{Qname: "tosub.example.org.", Qtype: dns.TypeA, Do: true,
			Answer: []dns.RR{test.CNAME("tosub.example.org. 300 IN CNAME www.sub.example.org.")}, Ns: append(slices.Clone(zSubNS), ds), Extra: zSubGlue}},
	})
	// A cut without DS: NODATA for DS.
	checkZone(t, `routingpolicy example.org {
		record @ SOA 3600 ns1.example.org. admin.example.org. 1 7200 1800 86400 60
		record sub NS 3600 ns.example.net.
	}`, []zoneCase{
		{Case: test.Case{Qname: "sub.example.org.", Qtype: dns.TypeDS, Ns: []dns.RR{zSOA}}},
		{Case: test.Case{Qname: "sub.example.org.", Qtype: dns.TypeA, Ns: []dns.RR{test.NS("sub.example.org. 3600 IN NS ns.example.net.")}}, notAA: true},
		{Case: test.Case{Qname: "sub.example.org.", Qtype: dns.TypeA, Do: true, Ns: []dns.RR{test.NS("sub.example.org. 3600 IN NS ns.example.net.")}}, notAA: true},
	})
}

// TestZoneApexNSGlue: R-ZONE-1: the apex NS answer carries the in-zone addresses of its name
// servers in additional and nothing in authority, as file.
func TestZoneApexNSGlue(t *testing.T) {
	checkZone(t, zoneBlock, []zoneCase{
		{Case: test.Case{Qname: "example.org.", Qtype: dns.TypeNS, Answer: zNS,
			Extra: []dns.RR{test.A("ns1.example.org. 300 IN A 192.0.2.53"), test.AAAA("ns1.example.org. 300 IN AAAA 2001:db8::53")}}},
	})
}

// TestZoneAdditional: R-ZONE-1: MX answers carry the in-zone addresses of their targets, as file.
func TestZoneAdditional(t *testing.T) {
	glue := []dns.RR{test.A("mail.example.org. 300 IN A 192.0.2.25"), test.AAAA("mail.example.org. 300 IN AAAA 2001:db8::25")}
	checkZone(t, zoneBlock, []zoneCase{
		{Case: test.Case{Qname: "mx.example.org.", Qtype: dns.TypeMX,
			Answer: []dns.RR{test.MX("mx.example.org. 300 IN MX 10 mail.example.org."), test.MX("mx.example.org. 300 IN MX 20 mail.example.net.")},
			Ns:     zNS, Extra: glue}},
		{Case: test.Case{Qname: "q.x.y.deep.example.org.", Qtype: dns.TypeMX,
			Answer: []dns.RR{test.MX("q.x.y.deep.example.org. 300 IN MX 10 mail.example.org.")}, Ns: zNS, Extra: glue}},
	})
	// A policy's MX item carries the addresses of its own targets.
	rp, _ := newTest(t, `routingpolicy example.org {
		record mail A 300 192.0.2.25
		wrr mx MX 60 "1=10 mail"
	}`)
	m := ask(t, rp, "mx.example.org.", dns.TypeMX, "10.1.1.1")
	if len(m.Extra) != 1 || m.Extra[0].(*dns.A).A.String() != "192.0.2.25" {
		t.Fatalf("policy MX additional: %v", m.Extra)
	}
}

// TestZoneWildcard: R-ZONE-2, RFC 4592: a wildcard matches names that do not exist, several labels
// deep, with the query name as owner; an existing name or empty non-terminal blocks it; a type
// it lacks is NODATA; a wildcard CNAME is chased; a wildcard that is an empty non-terminal
// answers NODATA.
func TestZoneWildcard(t *testing.T) {
	checkZone(t, zoneBlock, []zoneCase{
		{Case: test.Case{Qname: "any.wild.example.org.", Qtype: dns.TypeA,
			Answer: []dns.RR{test.A("any.wild.example.org. 300 IN A 192.0.2.1")}, Ns: zNS}},
		{Case: test.Case{Qname: "a.b.c.wild.example.org.", Qtype: dns.TypeTXT,
			Answer: []dns.RR{test.TXT(`a.b.c.wild.example.org. 300 IN TXT "wild"`)}, Ns: zNS}},
		{Case: test.Case{Qname: "any.wild.example.org.", Qtype: dns.TypeAAAA, Ns: []dns.RR{zSOA}}},
		// Blocked by an existing name, by an empty non-terminal, and below them.
		{Case: test.Case{Qname: "real.wild.example.org.", Qtype: dns.TypeA,
			Answer: []dns.RR{test.A("real.wild.example.org. 300 IN A 192.0.2.2")}, Ns: zNS}},
		{Case: test.Case{Qname: "real.wild.example.org.", Qtype: dns.TypeTXT, Ns: []dns.RR{zSOA}}},
		{Case: test.Case{Qname: "ent.wild.example.org.", Qtype: dns.TypeA, Ns: []dns.RR{zSOA}}},
		{Case: test.Case{Qname: "x.ent.wild.example.org.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{zSOA}}},
		{Case: test.Case{Qname: "x.real.wild.example.org.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{zSOA}}},
		// The wildcard's parent itself is not matched.
		{Case: test.Case{Qname: "wild.example.org.", Qtype: dns.TypeA, Ns: []dns.RR{zSOA}}},
		// A deeper wildcard: *.x.y.deep, not *.deep.
		{Case: test.Case{Qname: "q.y.deep.example.org.", Qtype: dns.TypeMX, Rcode: dns.RcodeNameError, Ns: []dns.RR{zSOA}}},
		// A wildcard CNAME, chased.
		{Case: test.Case{Qname: "foo.cwild.example.org.", Qtype: dns.TypeA,
			Answer: []dns.RR{test.CNAME("foo.cwild.example.org. 300 IN CNAME target.example.org."), test.A("target.example.org. 300 IN A 192.0.2.9")}, Ns: zNS}},
		{Case: test.Case{Qname: "foo.cwild.example.org.", Qtype: dns.TypeCNAME,
			Answer: []dns.RR{test.CNAME("foo.cwild.example.org. 300 IN CNAME target.example.org.")}, Ns: zNS}},
		// A wildcard that is an empty non-terminal.
		{Case: test.Case{Qname: "z.wildent.example.org.", Qtype: dns.TypeA, Ns: []dns.RR{zSOA}}},
	})
}

// TestZoneDNAME: R-ZONE-2, RFC 6672: a name below a DNAME gets the DNAME and a CNAME
// synthesized from it, chased in the zone; the owner answers its own data.
func TestZoneDNAME(t *testing.T) {
	dname := test.DNAME("dn.example.org. 300 IN DNAME target.example.org.")
	checkZone(t, zoneBlock, []zoneCase{
		{Case: test.Case{Qname: "x.dn.example.org.", Qtype: dns.TypeA,
			Answer: []dns.RR{dname, test.CNAME("x.dn.example.org. 300 IN CNAME x.target.example.org."), test.A("x.target.example.org. 300 IN A 192.0.2.10")}, Ns: zNS}},
		{Case: test.Case{Qname: "x.dn.example.org.", Qtype: dns.TypeCNAME,
			Answer: []dns.RR{dname, test.CNAME("x.dn.example.org. 300 IN CNAME x.target.example.org.")}, Ns: zNS}},
		{Case: test.Case{Qname: "nope.dn.example.org.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError,
			Answer: []dns.RR{dname, test.CNAME("nope.dn.example.org. 300 IN CNAME nope.target.example.org.")}, Ns: []dns.RR{zSOA}}},
		{Case: test.Case{Qname: "dn.example.org.", Qtype: dns.TypeTXT,
			Answer: []dns.RR{test.TXT(`dn.example.org. 300 IN TXT "owner"`)}, Ns: zNS}},
		{Case: test.Case{Qname: "dn.example.org.", Qtype: dns.TypeDNAME, Answer: []dns.RR{dname}, Ns: zNS}},
		{Case: test.Case{Qname: "a.b.out.example.org.", Qtype: dns.TypeA,
			Answer: []dns.RR{test.DNAME("out.example.org. 300 IN DNAME example.net."), test.CNAME("a.b.out.example.org. 300 IN CNAME a.b.example.net.")}, Ns: zNS}},
	})
}

// TestZoneDNAMETooLong: R-ZONE-2, RFC 6672 2.2: a substitution of 255 octets answers its CNAME;
// one of 256 or 257 is YXDOMAIN. Regression: the length was checked with dns.IsDomainName,
// which lets 257 octets through, and the answer could not be packed.
func TestZoneDNAMETooLong(t *testing.T) {
	l63 := strings.Repeat("t", 63)
	target := l63 + "." + l63 + "." + l63 + ".example.net." // 205 octets
	rp, _ := newTest(t, "routingpolicy example.org {\n record d DNAME 60 "+target+"\n}")
	for _, tc := range []struct {
		prefix int // octets of the one label above d: the result is 205 + 1 + prefix octets
		rcode  int
	}{{49, dns.RcodeSuccess}, {50, dns.RcodeYXDomain}, {51, dns.RcodeYXDomain}} {
		q := strings.Repeat("p", tc.prefix) + ".d.example.org."
		m := ask(t, rp, q, dns.TypeA, "10.1.1.1")
		if m.Rcode != tc.rcode {
			t.Errorf("%d octets after substitution: %s, want %s", 206+tc.prefix, dns.RcodeToString[m.Rcode], dns.RcodeToString[tc.rcode])
		}
		if _, err := m.Pack(); err != nil {
			t.Errorf("%d octets after substitution: the answer does not pack: %v", 206+tc.prefix, err)
		}
	}
}

// TestZoneLoadChecks: R-ZONE-2, R-ZONE-3: what cannot be answered as written is refused at load
// with an error that says why.
func TestZoneLoadChecks(t *testing.T) {
	for _, tc := range []struct{ data, err string }{
		// A policy at or under a zone cut names the record set and the cut.
		{`record sub NS 60 ns.example.net.
		  wrr www.sub A 60 "1=192.0.2.1"`, "wrr www.sub.example.org./A: the name is under the zone cut sub.example.org."},
		{`record sub NS 60 ns.example.net.
		  wrr sub A 60 "1=192.0.2.1"`, "wrr sub.example.org./A: the name is the zone cut sub.example.org."},
		{`record dn DNAME 60 example.net.
		  wrr x.dn A 60 "1=192.0.2.1"`, "wrr x.dn.example.org./A: the name is under the DNAME dn.example.org."},
		// DNAME and wildcard rules.
		{`record sub NS 60 ns.example.net.
		  record sub DNAME 60 example.net.`, "a DNAME cannot be at a zone cut (RFC 6672 2.3)"},
		{`record dn DNAME 60 a.dn`, "DNAME dn.example.org. → a.dn.example.org. points at or below itself"},
		{`record dn DNAME 60 a.example.net.
		  record dn DNAME 60 b.example.net.`, "a name has at most one DNAME"},
		// Two CNAMEs at one name: the answer carried both (found by FuzzZoneFile).
		{`record a CNAME 60 b
		  record a CNAME 60 c`, "for a.example.org.: a name has at most one CNAME (RFC 2181 10.1)"},
		{`record *.w DNAME 60 example.net.`, "DNAME at the wildcard *.w.example.org."},
		{`record *.w NS 60 ns.example.net.`, "NS records at the wildcard *.w.example.org."},
		// CNAME beside other data, at the apex.
		{`record a CNAME 60 b
		  record a TXT 60 x`, "a.example.org. has a CNAME and other data"},
		{`record @ CNAME 60 b.example.net.`, "CNAME at the zone apex"},
		// Signed data would be served unsigned.
		{`record a RRSIG 60 A 13 3 60 20300101000000 20200101000000 12345 example.org. AAAA`, "signed zone data is not supported"},
		// Names outside the zone.
		{`record www.example.net. A 60 192.0.2.1`, "outside the zones"},
		{`wrr www.example.net. A 60 "1=192.0.2.1"`, "outside the zones"},
	} {
		err := loadErr("routingpolicy example.org {\n" + tc.data + "\n}")
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s:\n  error %v\n  want  %q", tc.data, err, tc.err)
		}
	}
}

// TestZoneCNAMELoop: R-ZONE-3, regression: an in-zone CNAME loop answered 8 CNAMEs with NOERROR;
// it is a load error naming the loop, whatever closes it: plain records, a policy's item, a
// wildcard or a DNAME.
func TestZoneCNAMELoop(t *testing.T) {
	for _, tc := range []struct{ data, err string }{
		{`record a CNAME 60 b
		  record b CNAME 60 a`, "CNAME loop: a.example.org. → b.example.org. → a.example.org."},
		{`record a CNAME 60 a`, "CNAME loop: a.example.org. → a.example.org."},
		{`record a CNAME 60 b
		  wrr b CNAME 60 "1=c;1=a"
		  record c A 60 192.0.2.1`, "CNAME loop: a.example.org. → b.example.org. → a.example.org."},
		{`record a CNAME 60 x.w
		  record *.w CNAME 60 a`, "CNAME loop: a.example.org. → x.w.example.org. → a.example.org."},
		{`record d DNAME 60 e.example.org.
		  record x.e CNAME 60 x.d`, "CNAME and DNAME loop: x.d.example.org. → x.e.example.org. → x.d.example.org."},
		{`record d DNAME 60 e.example.org.
		  record e DNAME 60 d.example.org.`, "DNAME loop: x.d.example.org. → x.e.example.org. → x.d.example.org."},
		// A loop of DNAMEs that lengthens the name: every name below d comes back longer.
		{`record d DNAME 60 a.e.example.org.
		  record e DNAME 60 d.example.org.`, "DNAME loop: x.d.example.org. → x.a.e.example.org. → x.a.d.example.org. → …: every name below d.example.org. is substituted back below it"},
		{`record a CNAME 60 x.d
		  record d DNAME 60 b.f.example.org.
		  record f DNAME 60 g.example.org.
		  record g DNAME 60 d.example.org.`, "DNAME loop: x.d.example.org. → x.b.f.example.org. → x.b.g.example.org. → x.b.d.example.org. → …"},
	} {
		err := loadErr("routingpolicy example.org {\n" + tc.data + "\n}")
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s:\n  error %v\n  want  %q", tc.data, err, tc.err)
		}
	}
	// A chain that ends is fine, through a wildcard and a DNAME too.
	if err := loadErr(`routingpolicy example.org {
		record a CNAME 60 x.w
		record *.w CNAME 60 y.d
		record d DNAME 60 e.example.org.
		record y.e A 60 192.0.2.1
	}`); err != nil {
		t.Fatal(err)
	}
}

// TestZoneLongChainLoads: R-ZONE-3 refuses loops, not long chains, as file loads them: 70
// CNAMEs, 70 DNAMEs and a chain that passes a DNAME twice with a CNAME between load; the lookup
// answers as much as file would (TestZoneCNAMEChainLimit). Regression: any chain of more than 64
// steps was refused as "a loop through DNAME substitution".
func TestZoneLongChainLoads(t *testing.T) {
	var cnames, dnames strings.Builder
	for i := range 70 {
		fmt.Fprintf(&cnames, "record c%d CNAME 60 c%d\n", i, i+1)
		fmt.Fprintf(&dnames, "record d%d DNAME 60 d%d.example.org.\n", i, i+1)
	}
	for _, data := range []string{
		cnames.String() + "record c70 A 60 192.0.2.1",
		dnames.String() + "record x.d70 A 60 192.0.2.1",
		// x.d → x.e (CNAME) → y.d → y.e: the DNAME d twice, but a CNAME between starts anew.
		"record d DNAME 60 e.example.org.\nrecord x.e CNAME 60 y.d\nrecord y.e A 60 192.0.2.1",
	} {
		if err := loadErr("routingpolicy example.org {\n" + data + "\n}"); err != nil {
			t.Errorf("a chain without a loop is refused: %v", err)
		}
	}
}

// TestZoneDNAMELoopLongOwners: R-ZONE-3: a DNAME loop between owners of 246..253 octets is
// refused at load. Regression: the check probed "loop-check.<owner>", too long a name to
// substitute, so the loop loaded and "x.<owner>" answered DNAME/CNAME pairs to the chase limit.
func TestZoneDNAMELoopLongOwners(t *testing.T) {
	long := func(c string, last int) string {
		l63 := strings.Repeat(c, 63)
		return l63 + "." + l63 + "." + l63 + "." + strings.Repeat(c, last) + ".example.org."
	}
	for _, last := range []int{40, 44, 47} { // owners of 246, 250 and 253 octets
		a, b := long("a", last), long("b", last)
		err := loadErr("routingpolicy example.org {\n record " + a + " DNAME 60 " + b + "\n record " + b + " DNAME 60 " + a + "\n}")
		if err == nil || !strings.Contains(err.Error(), "loop: x."+a+" → x."+b+" → x."+a) {
			t.Errorf("owners of %d octets: a DNAME loop: error %v", len(a)+1, err)
		}
	}
	// An owner of 254 octets has no name below it: its DNAME substitutes nothing.
	a, b := long("a", 48), long("b", 48)
	if err := loadErr("routingpolicy example.org {\n record " + a + " DNAME 60 " + b + "\n record " + b + " DNAME 60 " + a + "\n}"); err != nil {
		t.Errorf("owners of 254 octets: %v", err)
	}
}

// TestZoneWildcardPolicy: R-ZONE-2: a policy on a wildcard name, inline and from a record-set
// file, answers per query with the query name as owner, health included.
func TestZoneWildcardPolicy(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "rs.yaml")
	if err := os.WriteFile(f, []byte(`- name: "*.api.example.org."
  type: A
  ttl: 30
  routingPolicy:
    healthCheck: web
    wrr:
      items:
      - {weight: 1, rrdatas: [10.0.1.1]}
      - {weight: 1, rrdatas: [10.0.1.2]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	rp, b := newTest(t, `routingpolicy example.org {
		recordsets `+f+`
		wrr *.app A 30 "1=10.0.0.1;1=10.0.0.2" healthcheck web
		record real.app A 30 10.0.0.9
	}`)
	for _, tc := range []struct{ name, a, b, real string }{
		{"x.y.app.example.org.", "10.0.0.1", "10.0.0.2", "10.0.0.9"},
		{"x.y.api.example.org.", "10.0.1.1", "10.0.1.2", ""},
	} {
		got := count(t, rp, tc.name, "10.1.1.1", 1000)
		if got[tc.a] == 0 || got[tc.b] == 0 || len(got) != 2 {
			t.Fatalf("%s: want both items, got %v", tc.name, got)
		}
		m := ask(t, rp, tc.name, dns.TypeA, "10.1.1.1")
		if len(m.Answer) != 1 || m.Answer[0].Header().Name != tc.name || !m.Authoritative {
			t.Fatalf("%s: owner must be the query name: %v", tc.name, m.Answer)
		}
		set(b, "web", tc.a, health.Unhealthy)
		if got := count(t, rp, tc.name, "10.1.1.1", 100); got[tc.b] != 100 {
			t.Fatalf("%s with %s unhealthy: %v", tc.name, tc.a, got)
		}
	}
	// An existing name blocks the wildcard policy.
	if got := addrs(ask(t, rp, "real.app.example.org.", dns.TypeA, "10.1.1.1")); got != "10.0.0.9" {
		t.Fatalf("real.app: %s", got)
	}
	// The policy's own name, asked literally, answers too (with its own owner).
	if m := ask(t, rp, "*.app.example.org.", dns.TypeA, "10.1.1.1"); len(m.Answer) != 1 || m.Answer[0].Header().Name != "*.app.example.org." {
		t.Fatalf("*.app: %v", m.Answer)
	}
}

// manyItems returns n WRR or geo items in the record-set format.
func manyItems(n int, geo bool) string {
	var b strings.Builder
	for i := range n {
		if geo {
			fmt.Fprintf(&b, "      - {location: r%d, rrdatas: [10.0.%d.%d]}\n", i, i/250, i%250+1)
		} else {
			fmt.Fprintf(&b, "      - {weight: 1, rrdatas: [10.0.%d.%d]}\n", i/250, i%250+1)
		}
	}
	return b.String()
}

// TestZoneItemLimit: R-ZONE-3, regression: a record-set file with more than 128 WRR items loaded
// and then panicked in the query path (index out of range [128], SERVFAIL); the same shape of
// geo could panic in a file reload. The limit is checked at load for every source.
func TestZoneItemLimit(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "rs.yaml")
	write := func(s string) {
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	block := "routingpolicy example.org {\n recordsets " + f + "\n}"
	write("- name: www.example.org.\n  type: A\n  routingPolicy:\n    wrr:\n      items:\n" + manyItems(129, false))
	if err := loadErr(block); err == nil || !strings.Contains(err.Error(), "wrr www.example.org./A") || !strings.Contains(err.Error(), "129 items, at most 128 allowed") {
		t.Fatalf("129 WRR items in a file: %v", err)
	}
	var coords strings.Builder
	for i := range 300 {
		fmt.Fprintf(&coords, "coordinates r%d %d 0\n", i, i%90)
	}
	geoBlock := "routingpolicy example.org {\n" + coords.String() + " recordsets " + f + "\n}"
	write("- name: www.example.org.\n  type: A\n  routingPolicy:\n    geo:\n      items:\n" + manyItems(300, true))
	if err := loadErr(geoBlock); err == nil || !strings.Contains(err.Error(), "300 items, at most 128 allowed") {
		t.Fatalf("300 geo items in a file: %v", err)
	}
	// 128 is allowed and answers.
	write("- name: www.example.org.\n  type: A\n  routingPolicy:\n    wrr:\n      items:\n" + manyItems(128, false))
	rp, _ := newTest(t, block)
	if m := ask(t, rp, "www.example.org.", dns.TypeA, "10.1.1.1"); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Fatalf("128 items: %v", m)
	}
	// Inline, the same limit.
	items := make([]string, 0, 129)
	for i := range 129 {
		items = append(items, fmt.Sprintf("1=10.0.0.%d", i%250+1))
	}
	if err := loadErr(`routingpolicy example.org {
		wrr www A 60 "` + strings.Join(items, ";") + `"
	}`); err == nil || !strings.Contains(err.Error(), "129 items, at most 128 allowed") {
		t.Fatalf("129 inline items: %v", err)
	}
}

// TestZoneChecksEverySource: R-ZONE-3: the zone checks run on zone files and record-set files,
// at load and on every file reload; a reload that fails them keeps the last good data and logs
// why.
func TestZoneChecksEverySource(t *testing.T) {
	dir := t.TempDir()
	zf := filepath.Join(dir, "db.example.org")
	rs := filepath.Join(dir, "rs.json")
	write := func(f, s string, mod time.Time) {
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ zone, rs, err string }{
		{"a 60 CNAME b\nb 60 CNAME a\n", "[]", "CNAME loop: a.example.org. → b.example.org. → a.example.org."},
		{"", `[{"name": "a.example.org.", "type": "CNAME", "rrdatas": ["b.example.org."]}, {"name": "b.example.org.", "type": "CNAME", "rrdatas": ["a.example.org."]}]`, "CNAME loop"},
		{"a 60 CNAME b\na 60 TXT x\n", "[]", "has a CNAME and other data"},
		{"", `[{"name": "a.example.org.", "type": "CNAME", "rrdatas": ["b.example.org."]}, {"name": "a.example.org.", "type": "TXT", "rrdatas": ["x"]}]`, "has a CNAME and other data"},
		{"www.example.net. 60 A 192.0.2.1\n", "[]", "outside the zones"},
		{"", `[{"name": "www.example.net.", "type": "A", "rrdatas": ["192.0.2.1"]}]`, "outside the zones"},
		{"sub 60 NS ns.example.net.\n", `[{"name": "www.sub.example.org.", "type": "A", "routingPolicy": {"wrr": {"items": [{"weight": 1, "rrdatas": ["192.0.2.1"]}]}}}]`, "under the zone cut sub.example.org."},
	} {
		write(zf, "$ORIGIN example.org.\n@ 60 NS ns.example.net.\n"+tc.zone, fixedNow)
		write(rs, tc.rs, fixedNow)
		err := loadErr("routingpolicy example.org {\n zonefile " + zf + "\n recordsets " + rs + "\n}")
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("zone %q, recordsets %s: error %v, want %q", tc.zone, tc.rs, err, tc.err)
		}
	}

	// A reload that brings a loop keeps the last good data and logs why.
	write(zf, "$ORIGIN example.org.\n@ 60 NS ns.example.net.\na 60 CNAME b\nb 60 A 192.0.2.1\n", fixedNow)
	write(rs, "[]", fixedNow)
	rp, _ := newTest(t, "routingpolicy example.org {\n reload 0\n zonefile "+zf+"\n recordsets "+rs+"\n}")
	logs := coretest.CaptureLog(t)
	write(zf, "$ORIGIN example.org.\n@ 60 NS ns.example.net.\na 60 CNAME b\nb 60 CNAME a\n", fixedNow.Add(time.Second))
	if rp.reloadIfChanged(fixedNow) {
		t.Fatal("a zone file with a CNAME loop was loaded")
	}
	if logs.Count("Reload of [example.org.] failed, serving the last good data", "CNAME loop: a.example.org. → b.example.org. → a.example.org.") != 1 {
		t.Fatalf("the failed reload is not logged with its reason:\n%s", logs)
	}
	if got := addrs(ask(t, rp, "a.example.org.", dns.TypeA, "10.1.1.1")); got != "192.0.2.1,CNAME:b.example.org." {
		t.Fatalf("after the failed reload: %s", got)
	}
}

// TestZoneEscapedNames: R-ZONE-1: a name written with escapes (RFC 1035 5.1) is the name of its
// wire form, from every source (inline, record-set file) and in every place (owners, policy
// names, targets): `\097bc` is `abc`, `\042` is the wildcard label. A query built in the server
// (not unpacked from the wire) may carry such escapes too: `\097bc` and `abc` find the same
// records. Regression: names were keyed as written and never found.
func TestZoneEscapedNames(t *testing.T) {
	f := filepath.Join(t.TempDir(), "rs.yaml")
	if err := os.WriteFile(f, []byte(`- {name: "\\042.api.example.org.", type: A, ttl: 30, routingPolicy: {wrr: {items: [{weight: 1, rrdatas: [10.0.1.1]}]}}}
- {name: "\\102ile.example.org.", type: A, ttl: 30, rrdatas: [10.0.1.2]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	rp, _ := newTest(t, `routingpolicy example.org {
		recordsets `+f+`
		record \097bc A 60 192.0.2.1
		record x\046y A 60 192.0.2.2
		record alias CNAME 60 \097BC
		wrr \*.pol A 60 "1=192.0.2.3"
		record mx MX 60 10 \097bc
	}`)
	for _, tc := range []struct{ qname, want string }{
		{"abc.example.org.", "192.0.2.1"},
		{`\097bc.example.org.`, "192.0.2.1"},
		{`\065BC.example.org.`, "192.0.2.1"},
		{`x\.y.example.org.`, "192.0.2.2"},
		{`x\046y.example.org.`, "192.0.2.2"},
		// The CNAME as file answers it: lower case, escapes as written: abc on the wire.
		{"alias.example.org.", `192.0.2.1,CNAME:abc.example.org.`},
		{"q.pol.example.org.", "192.0.2.3"},
		{"q.api.example.org.", "10.0.1.1"},
		{"file.example.org.", "10.0.1.2"},
	} {
		m := ask(t, rp, tc.qname, dns.TypeA, "10.1.1.1")
		if got := addrs(m); got != tc.want || m.Rcode != dns.RcodeSuccess {
			t.Errorf("%s A: %s %s, want %s", tc.qname, dns.RcodeToString[m.Rcode], got, tc.want)
		}
	}
	if m := ask(t, rp, "mx.example.org.", dns.TypeMX, "10.1.1.1"); len(m.Extra) != 1 {
		t.Errorf("MX to an escaped in-zone name: no additional address: %v", m.Extra)
	}
	// Octets outside printable ASCII written raw in a zone file (UTF-8, or not) are the octets a
	// query carries as \DDD; case is ASCII only (RFC 4343). Regression: lower-casing them as UTF-8
	// changed them (and an invalid octet into three).
	zf := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(zf, []byte("$ORIGIN example.org.\n$TTL 60\n@ NS ns.example.net.\ncaf\xc3\xa9 A 192.0.2.4\n\xc3\x9cber A 192.0.2.5\nx\xff A 192.0.2.6\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rp, _ = newTest(t, "routingpolicy example.org {\n zonefile "+zf+"\n}")
	for qname, want := range map[string]string{
		`caf\195\169.example.org.`: "192.0.2.4", "caf\xc3\xa9.example.org.": "192.0.2.4",
		`\195\156ber.example.org.`: "192.0.2.5", `x\255.example.org.`: "192.0.2.6",
	} {
		if got := addrs(ask(t, rp, qname, dns.TypeA, "10.1.1.1")); got != want {
			t.Errorf("%q A: %q, want %s", qname, got, want)
		}
	}
	// A name not under the zone because its dot is escaped: one label "a.example" under "org.".
	if inZone(`a\.example.org.`, "example.org.") || !inZone(`a\\.example.org.`, "example.org.") {
		t.Error(`inZone must tell an escaped dot ("a\.example.org.") from a label ending in a backslash`)
	}
}

// TestZoneEscapedQueryNoAlloc: R-ZONE-1 without a cost on the query path: a query name in wire
// form with escapes (`x\.y`) is looked up as it is, with no allocation beyond those of a plain
// name (and of CoreDNS's request.Name, which rewrites such a name, and of miekg/dns's packing of
// the question, which copies such a name); only a name built in the server with other escapes is
// converted.
func TestZoneEscapedQueryNoAlloc(t *testing.T) {
	rp, _ := newTest(t, `routingpolicy example.org {
		record abc A 60 192.0.2.1
		record x\.y A 60 192.0.2.2
	}`)
	w := &fixedAddrWriter{addr: &net.UDPAddr{IP: net.ParseIP("10.1.1.1"), Port: 40212}}
	// AllocsPerRun counts the whole process's allocations: a goroutine another test left (a
	// timer, a log write) can add one to a measurement, never take one away, so the fewest of
	// three measurements is the query's.
	allocs := func(name string) float64 {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		sw := request.NewScrubWriter(m, w) // as the server gives it
		fewest := math.Inf(1)
		for range 3 {
			serve := testing.AllocsPerRun(100, func() { rp.ServeDNS(context.Background(), sw, m) })
			state := testing.AllocsPerRun(100, func() { _ = (&request.Request{W: w, Req: m}).Name() })
			var buf [256]byte
			question := testing.AllocsPerRun(100, func() { _, _ = dns.PackDomainName(name, buf[:], 0, nil, false) })
			fewest = min(fewest, serve-state-question)
		}
		return fewest
	}
	plain, escaped := allocs("abc.example.org."), allocs(`x\.y.example.org.`)
	if escaped > plain {
		t.Fatalf(`x\.y.example.org. allocates %v times per query besides request.Name, abc.example.org. %v`, escaped, plain)
	}
	for _, tc := range []struct {
		name string
		wire bool
	}{{`x\.y.`, true}, {`my\ printer.`, true}, {`a\255b.`, true}, {`a\"b.`, true}, {`\097bc.`, false},
		{`x\046y.`, false}, {`\*.`, false}, {`a\`, false}, {`a\300.`, false}} {
		if wireEscaped(tc.name) != tc.wire {
			t.Errorf("wireEscaped(%q) = %v", tc.name, !tc.wire)
		}
	}
}

// TestZoneRootWildcard: R-ZONE-2, RFC 4592 in the root zone: "*." is the wildcard of the apex and
// matches "foo.". Regression: its parent was taken as name[2:], "" for "*.", so it never matched.
func TestZoneRootWildcard(t *testing.T) {
	rp, _ := newTest(t, `routingpolicy . {
		record * A 60 192.0.2.2
		record *.sub A 60 192.0.2.3
	}`)
	for _, tc := range []struct{ qname, want string }{
		{"x.sub.", "192.0.2.3"},
		{"foo.", "192.0.2.2"},
		{"a.b.foo.", "192.0.2.2"},
	} {
		m := ask(t, rp, tc.qname, dns.TypeA, "10.1.1.1")
		if got := addrs(m); m.Rcode != dns.RcodeSuccess || got != tc.want || m.Answer[0].Header().Name != tc.qname {
			t.Errorf("%s A under the root zone's wildcards: %s %v, want %s", tc.qname, dns.RcodeToString[m.Rcode], m.Answer, tc.want)
		}
	}
}

// TestZoneRecordWithoutRdata: R-ZONE-3: the zone parser accepts a record with no rdata (`a
// CNAME`, as dynamic updates write them) or with rdata cut short; loaded, it answered an empty
// CNAME no resolver can use (seen while fuzzing). It is refused at load, from a zone file and
// inline.
func TestZoneRecordWithoutRdata(t *testing.T) {
	dir := t.TempDir()
	n := 0 // each source a file of its own: the table is written before it is read
	source := func(directive, text string) string {
		n++
		f := filepath.Join(dir, fmt.Sprintf("%s%d", directive, n))
		if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return directive + " " + f
	}
	zoneFile := func(text string) string { return source("zonefile", text) }
	recordSets := func(json string) string { return source("recordsets", json) }
	const head = "$ORIGIN example.org.\n$TTL 60\n@ SOA ns1 h 1 2 3 4 5\n@ NS ns1\n"
	for _, tc := range []struct {
		what, source, err string // err "": loads
	}{
		{"a CNAME without a target in a zone file", zoneFile("$ORIGIN example.org.\n$TTL 60\na CNAME\n"), "at line: "}, // the parser's error, naming the line
		{"an inline CNAME without a target", `record a CNAME 60 ""`, "no rdata"},
		{"a policy item CNAME without a target", `wrr a CNAME 60 "1=b;1= "`, `item "1": empty rdata`},
		// FuzzZoneFileRoundTrip's crashers: a last line without data was read as miekg/dns's
		// dynamic-update form, every field zero (srv-empty-target-last-line: SRV 0 0 0 with no
		// target; caa-empty-form-last-line: CAA 0 "" ""); it loaded and printed back did not parse.
		{"an SRV without data on the last line", zoneFile("$ORIGIN example.org.\n$TTL 0\n0 srv"), "at line: "},                   // the parser's error, naming the line
		{"a CAA without data on the last line", zoneFile("$ORIGIN example.org.\n$TTL 0\n0 TXT \"\"\"0000\"\n CAA"), "at line: "}, // the parser's error, naming the line
		// A type whose empty form parses back when printed (DS 0 0 0, empty digest; a review
		// found these loading after the check compared data with zeros).
		{"a DS without data on the last line", zoneFile(head + "x DS"), "at line: "}, // the parser's error, naming the line
		{"an inline DS without data", `record x DS 60 ""`, "no rdata"},
		{"a DS with empty rdata in a record-set file", recordSets(`[{"name":"x.example.org.","type":"DS","ttl":60,"rrdatas":[" "]}]`), "no rdata"},
		{"an HTTPS with empty rdata in a record-set file", recordSets(`[{"name":"www.example.org.","type":"HTTPS","ttl":60,"rrdatas":[""]}]`), "no rdata"},
		// RFC 3597's generic form with no data, for types with fields.
		{"SRV \\# 0", zoneFile(head + `x SRV \# 0` + "\n"), "no rdata (a SRV record needs some"},
		{"CAA \\# 0", zoneFile(head + `x CAA \# 0` + "\n"), "no rdata (a CAA record needs some"},
		{"MX \\# 0", zoneFile(head + `x MX \# 0` + "\n"), "no rdata (a MX record needs some"},
		// Data that is all zeros but written is data: SRV 0 0 0 . ("no service", RFC 2782), and
		// the types whose zero value is valid data (a review found them refused).
		{"SRV 0 0 0 .", `record _x._tcp SRV 60 "0 0 0 ."`, ""},
		{"records whose written data is all zeros", zoneFile(head + `relay AMTRELAY 0 0 0 .
h HINFO "" ""
c CSYNC 0 0
e EUI48 00-00-00-00-00-00
n NID 0 0000:0000:0000:0000
g TYPE62 \# 6 000000000000
`), ""},
	} {
		err := loadErr("routingpolicy example.org {\n " + tc.source + "\n}")
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.what, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one with %q", tc.what, err, tc.err)
		}
	}
}

// TestZoneRefusedWhereFileLoads: R-ZONE-3, and the load rows of README's "Differences from file":
// each zone file here loads in file and is refused by routingpolicy, with an error that says why.
// A row whose file behaviour changes fails here.
func TestZoneRefusedWhereFileLoads(t *testing.T) {
	dir := t.TempDir()
	inc := filepath.Join(dir, "inc")
	if err := os.WriteFile(inc, []byte("b A 192.0.2.2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const head = "$ORIGIN example.org.\n$TTL 60\n@ SOA ns1 h 1 2 3 4 5\n@ NS ns1\nns1 A 192.0.2.1\n"
	for _, tc := range []struct{ data, err string }{
		{"a CNAME b\na TXT x\n", "has a CNAME and other data"},
		{"@ CNAME b.example.net.\n", "example.org. has a CNAME and other data"}, // the apex has its SOA and NS
		{"a CNAME b\na CNAME c\n", "a name has at most one CNAME"},
		{"a CNAME b\nb CNAME a\n", "CNAME loop"},
		{"dn DNAME a.example.net.\ndn DNAME b.example.net.\n", "a name has at most one DNAME"},
		{"sub NS ns.example.net.\nsub DNAME example.net.\n", "a DNAME cannot be at a zone cut"},
		{"dn DNAME a.dn\n", "points at or below itself"},
		{"*.w NS ns.example.net.\n", "NS records at the wildcard"},
		{"*.w DNAME example.net.\n", "DNAME at the wildcard"},
		{"a RRSIG A 13 3 60 20300101000000 20200101000000 12345 example.org. AAAA\n", "signed zone data is not supported"},
		{"a NSEC b A\n", "signed zone data is not supported"},
		{"www.example.net. A 192.0.2.1\n", "outside the zones"},
		{"@ SOA ns2 h 2 2 3 4 5\n", "second SOA"},
		{"a CNAME\n", "unexpected newline"},
		{"chx CH TXT \"chaos\"\n", "only class IN is served"},
		{"$INCLUDE " + inc + "\n", "$INCLUDE"},
		{"$ORIGIN example.org.\n$TTL 60\n@ SOA ns1 h 1 2 3 4 5\nwww A 192.0.2.1\n", "has no NS records at the apex of example.org."},
	} {
		text := head + tc.data
		if strings.HasPrefix(tc.data, "$ORIGIN") {
			text = tc.data // a whole file, without head's NS
		}
		if _, err := file.Parse(strings.NewReader(text), "example.org.", filepath.Join(dir, "db"), 0); err != nil {
			t.Errorf("%q: file no longer loads it (%v): README's row is obsolete", tc.data, err)
		}
		zf := filepath.Join(dir, "db")
		if err := os.WriteFile(zf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := loadErr("routingpolicy example.org {\n zonefile " + zf + "\n}"); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: error %v, want %q", tc.data, err, tc.err)
		}
	}
}

// TestZoneOccludedDataWarnedRZone2: R-ZONE-2: data that loads but no query is answered from is
// named in a warning, a line per zone cut or DNAME, logged when the data is served (setup, a
// reload that succeeds; not a refused one): at or below a cut, what is neither the cut's NS and DS
// sets nor served as glue or additional data; below a DNAME, what is not served as additional
// data. The answers stay file's (a referral, a substitution); a zone whose data is all answered
// logs nothing of the kind.
func TestZoneOccludedDataWarnedRZone2(t *testing.T) {
	zf := filepath.Join(t.TempDir(), "db")
	const head = "$ORIGIN example.org.\n$TTL 60\n@ SOA ns1 h 1 2 3 4 5\n@ NS ns1\nns1 A 192.0.2.1\n"
	version, writeVersion := 0, versionWriter(t, zf)
	write := func(data string) {
		version++
		writeVersion(head+data, version)
	}
	const hiding = "sub NS ns.sub\nsub DS 1 13 2 abababababababababababababababababababababababababababababababab\n" +
		"ns.sub A 192.0.2.2\nns.sub AAAA 2001:db8::2\nsub TXT hidden\nwww.sub A 192.0.2.3\n" +
		"a.b.sub MX 10 x\nc.sub TXT c\nd.sub TXT d\ne.sub TXT e\n" +
		"@ MX 10 mail.sub\nmail.sub A 192.0.2.9\n" + // an MX target below the cut: additional data
		"a NS ns.b\nb NS ns.example.net.\nns.b A 192.0.2.10\n" + // ns.b is no cut's glue (not below a)
		"dn DNAME example.net.\ndn TXT owner\nx.dn A 192.0.2.4\n"
	write(hiding)
	block := "routingpolicy example.org {\n reload 0\n zonefile " + zf + "\n}"

	logs := coretest.CaptureLog(t)
	rp, _ := newTest(t, block) // OnStartup logs it, once the data is served
	want := []string{
		"Zone example.org.: 1 record set is at or below the zone cut b.example.org. and never answered (a referral is; only glue and additional data serve): ns.b.example.org. A",
		"Zone example.org.: 1 record set is below the DNAME at dn.example.org. and never answered (queries there are substituted; RFC 6672 2.3): x.dn.example.org. A",
		"Zone example.org.: 6 record sets are at or below the zone cut sub.example.org. and never answered (a referral is; only glue and additional data serve): " +
			"a.b.sub.example.org. MX, c.sub.example.org. TXT, d.sub.example.org. TXT, e.sub.example.org. TXT, sub.example.org. TXT and 1 more",
	}
	for _, w := range want {
		if logs.Count(w) != 1 {
			t.Errorf("startup does not log once %q:\n%s", w, logs)
		}
	}
	if n := logs.Count("never answered"); n != len(want) {
		t.Errorf("startup logs %d lines of hidden data, want %d (glue, additional data, a cut's DS, a DNAME owner's own data named?):\n%s", n, len(want), logs)
	}

	if m := ask(t, rp, "www.sub.example.org.", dns.TypeA, "10.1.1.1"); m.Authoritative || len(m.Answer) != 0 || len(m.Ns) != 1 {
		t.Errorf("www.sub: want the referral, got %v", m)
	}
	if m := ask(t, rp, "example.org.", dns.TypeMX, "10.1.1.1"); len(m.Extra) == 0 || !strings.Contains(m.Extra[0].String(), "mail.sub.example.org.") {
		t.Errorf("the MX target below the cut is not the additional data it was not warned for: %v", m.Extra)
	}
	// A refused reload logs its error, not the hidden data; one that succeeds logs it again.
	logs = coretest.CaptureLog(t)
	write(hiding + "loop CNAME loop\n")
	if rp.reloadIfChanged(fixedNow) || logs.Count("never answered") != 0 {
		t.Errorf("a refused reload logged the hidden data:\n%s", logs)
	}
	write(hiding)
	if !rp.reloadIfChanged(fixedNow) || logs.Count("never answered") != len(want) {
		t.Errorf("a reload logged %d lines of hidden data, want %d:\n%s", logs.Count("never answered"), len(want), logs)
	}
	// Many cuts: ten lines, then a count.
	var many strings.Builder
	for i := range 12 {
		fmt.Fprintf(&many, "c%02d NS ns.example.net.\nx.c%02d TXT x\n", i, i)
	}
	write(many.String())
	logs = coretest.CaptureLog(t)
	if !rp.reloadIfChanged(fixedNow) || logs.Count("never answered") != 11 || logs.Count("Zone example.org.: 2 more zone cuts or DNAMEs hide 2 record sets, never answered") != 1 {
		t.Errorf("twelve cuts hiding data: want ten lines and a count:\n%s", logs)
	}
	// What a cut or DNAME hides hides the glue and additional data of its own record sets too.
	write("sub NS ns.example.net.\nm.sub MX 10 mx.sub\nmx.sub A 192.0.2.6\ndeep.sub NS ns.deep.sub\nns.deep.sub A 192.0.2.7\n" +
		"dn DNAME example.net.\nc.dn NS ns.c.dn\nns.c.dn A 192.0.2.8\n")
	logs = coretest.CaptureLog(t)
	if !rp.reloadIfChanged(fixedNow) ||
		logs.Count("4 record sets are at or below the zone cut sub.example.org.", "deep.sub.example.org. NS, m.sub.example.org. MX, mx.sub.example.org. A, ns.deep.sub.example.org. A") != 1 ||
		logs.Count("2 record sets are below the DNAME at dn.example.org.", "c.dn.example.org. NS, ns.c.dn.example.org. A") != 1 {
		t.Errorf("the glue and additional data of hidden record sets are not named as hidden:\n%s", logs)
	}
	// Nothing hidden: nothing logged.
	write("www A 192.0.2.5\nsub NS ns.sub\nns.sub A 192.0.2.2\n")
	logs = coretest.CaptureLog(t)
	if !rp.reloadIfChanged(fixedNow) || logs.Count("never answered") != 0 {
		t.Errorf("a zone whose data is all answered warns:\n%s", logs)
	}
}

// TestZoneOccludedDataNotLoggedWhenRefusedRZone2: R-ZONE-2: data that startup refuses (here a
// policy on a name outbound forwards) logs its error, not the data it would have hidden.
func TestZoneOccludedDataNotLoggedWhenRefusedRZone2(t *testing.T) {
	cfgs, err := parse(caddy.NewTestController("dns", `routingpolicy example.org {
		region us-east1
		record sub NS 60 ns.example.net.
		record www.sub TXT 60 hidden
		geo db.corp A 30 "us-east1=10.0.0.53"
	}`))
	if err != nil {
		t.Fatal(err)
	}
	d, err := cfgs[0].load(fixedNow)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.occluded) != 1 {
		t.Fatalf("hidden data: %q, want one line", d.occluded)
	}
	logs := coretest.CaptureLog(t)
	if err := startBesideOutbound(t, New(cfgs[0], d), "corp.example.org."); err == nil || !strings.Contains(err.Error(), "which outbound forwards") {
		t.Fatalf("startup: %v, want the forwarded name refused", err)
	}
	if logs.Count("never answered") != 0 {
		t.Errorf("refused data logged what it hides:\n%s", logs)
	}
}

// TestZoneNSEC3RefusedRZone3: R-ZONE-3 (types): NSEC3 and NSEC3PARAM records, which `file`
// refuses too, are refused at load as the other signed data is, naming the record.
func TestZoneNSEC3RefusedRZone3(t *testing.T) {
	zf := filepath.Join(t.TempDir(), "db")
	for _, tc := range []struct{ data, record string }{
		{"a NSEC3 1 0 1 - 2VPTU5TIMAMQTTGL4LUU9KG21E0AOR3S A\n", `a.example.org.\t60\tIN\tNSEC3\t`},
		{"@ NSEC3PARAM 1 0 1 -\n", `example.org.\t60\tIN\tNSEC3PARAM\t`},
	} {
		if err := os.WriteFile(zf, []byte("$ORIGIN example.org.\n$TTL 60\n@ SOA ns1 h 1 2 3 4 5\n@ NS ns1\nns1 A 192.0.2.1\n"+tc.data), 0o600); err != nil {
			t.Fatal(err)
		}
		err := loadErr("routingpolicy example.org {\n zonefile " + zf + "\n}")
		if err == nil || !strings.Contains(err.Error(), "signed zone data is not supported") || !strings.Contains(err.Error(), `record "`+tc.record) {
			t.Errorf("%q: error %v, want signed zone data refused naming the record", tc.data, err)
		}
	}
}

// TestZoneClassINOnlyRZone3: R-ZONE-3, regression: a record of a class other than IN in a zone
// file (`chx CH TXT "chaos"`) was rewritten to IN and answered so. It is refused at load, naming
// the record, whatever the source; the inline and record-set parsers give IN only.
func TestZoneClassINOnlyRZone3(t *testing.T) {
	zf := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(zf, []byte("$ORIGIN example.org.\n$TTL 60\n@ SOA ns1 h 1 2 3 4 5\n@ NS ns1\nchx CH TXT \"chaos\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := loadErr("routingpolicy example.org {\n zonefile " + zf + "\n}")
	if err == nil || !strings.Contains(err.Error(), `record "chx.example.org.\t60\tCH\tTXT\t\"chaos\""`) || !strings.Contains(err.Error(), "only class IN is served") {
		t.Fatalf("a CH record in a zone file: %v, want an error naming it", err)
	}
	for _, class := range []uint16{dns.ClassCHAOS, dns.ClassHESIOD, dns.ClassANY, 0} {
		rr := &dns.A{Hdr: dns.RR_Header{Name: "a.example.org.", Rrtype: dns.TypeA, Class: class, Ttl: 60}, A: net.IPv4(192, 0, 2, 1)}
		if _, err := build([]string{"example.org."}, mustLocator(t), testSource([]dns.RR{rr}), nil, fixedNow); err == nil || !strings.Contains(err.Error(), "only class IN is served") {
			t.Errorf("class %s given to build: %v, want an error", dns.Class(class), err)
		}
	}
	// What the other sources give is IN.
	inline, err := parseRecord([]string{"chx", "TXT", "60", "chaos"}, "example.org.")
	if err != nil || inline.Header().Class != dns.ClassINET {
		t.Errorf("inline record: %v, %v", inline, err)
	}
	rrs, _, _, err := parseRecordSets([]byte(`[{"name": "chx.example.org.", "type": "TXT", "rrdatas": ["\"chaos\""]}]`), "rs.json")
	if err != nil || len(rrs) != 1 || rrs[0].Header().Class != dns.ClassINET {
		t.Errorf("record-set file: %v, %v", rrs, err)
	}
}

// TestZoneDuplicatesDroppedRZone3: R-ZONE-3 and RFC 2181 5, regression: a record given twice
// (same owner, class, type and rdata; case and TTL aside, as dns.IsDuplicate compares them)
// made the zone refuse to load, where file loads it. The later copy is dropped with a warning
// that names it and where it came from, and the answer has the record once.
func TestZoneDuplicatesDroppedRZone3(t *testing.T) {
	zf := filepath.Join(t.TempDir(), "db.example.org")
	if err := os.WriteFile(zf, []byte("$ORIGIN example.org.\n$TTL 60\n@ SOA ns1 h 1 2 3 4 5\n@ NS ns1\n@ NS ns1\nd A 192.0.2.1\nd 120 A 192.0.2.1\nD A 192.0.2.1\nd A 192.0.2.2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := coretest.CaptureLog(t)
	rp, _ := newTest(t, `routingpolicy example.org {
		zonefile `+zf+`
		record d A 300 192.0.2.2
		record t TXT 60 "x y"
		record t TXT 60 "x y"
	}`)
	if got := addrs(ask(t, rp, "d.example.org.", dns.TypeA, "10.1.1.1")); got != "192.0.2.1,192.0.2.2" {
		t.Errorf("d A: %s, want each address once", got)
	}
	if m := ask(t, rp, "t.example.org.", dns.TypeTXT, "10.1.1.1"); len(m.Answer) != 1 {
		t.Errorf("t TXT: %v, want the record once", m.Answer)
	}
	if m := ask(t, rp, "example.org.", dns.TypeNS, "10.1.1.1"); len(m.Answer) != 1 {
		t.Errorf("apex NS: %v, want the record once", m.Answer)
	}
	for _, w := range []struct{ rr, from string }{
		{"example.org.\t60\tIN\tNS\tns1.example.org.", zf},
		{"d.example.org.\t120\tIN\tA\t192.0.2.1", zf},
		{"d.example.org.\t60\tIN\tA\t192.0.2.1", zf},
		{"d.example.org.\t60\tIN\tA\t192.0.2.2", zf}, // the Corefile's came first
		{"t.example.org.\t60\tIN\tTXT\t\"x y\"", "the Corefile"},
	} {
		if n := logs.Count("[WARNING] plugin/routingpolicy: Record " + strconv.Quote(w.rr) + " from " + w.from + " is given twice: dropped (RFC 2181 5)"); n != 1 {
			t.Errorf("warnings about %s from %s: %d, want 1:\n%s", w.rr, w.from, n, logs)
		}
	}
}

// TestZoneFileApexNSRZone3: R-ZONE-3, regression: a zone file without NS records at its apex
// was served with an NS record invented from the SOA's MNAME. A master file gives its zone's NS
// records (RFC 1035 5.2, RFC 1034 4.2.1): it is refused at load, unless the Corefile gives them.
// A record-set file that gives a zone's SOA but no NS is refused the same way; one that gives
// neither, and inline data, keep the documented synthesis (NS: the SOA's MNAME).
func TestZoneFileApexNSRZone3(t *testing.T) {
	dir := t.TempDir()
	zf, rs := filepath.Join(dir, "db"), filepath.Join(dir, "rs.json")
	write := func(f, s string) {
		t.Helper()
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(zf, "$ORIGIN example.org.\n$TTL 60\n@ SOA ns9.example.net. h 1 2 3 4 5\nwww A 192.0.2.1\n")
	err := loadErr("routingpolicy example.org {\n zonefile " + zf + "\n}")
	if err == nil || !strings.Contains(err.Error(), "zonefile "+zf+" has no NS records at the apex of example.org.") {
		t.Errorf("a zone file without apex NS: %v", err)
	}
	// Nor from a zone file whose records fill a second zone of the block.
	write(zf, "$ORIGIN example.org.\n$TTL 60\n@ SOA ns1 h 1 2 3 4 5\n@ NS ns1\nwww.sub A 192.0.2.1\n")
	err = loadErr("routingpolicy example.org sub.example.org {\n zonefile " + zf + "\n}")
	if err == nil || !strings.Contains(err.Error(), "has no NS records at the apex of sub.example.org.") {
		t.Errorf("a zone file without the apex NS of the second zone: %v", err)
	}
	// A zone file whose records are all in another zone of the block asks nothing of the first:
	// example.org's NS is synthesized from its inline data, as without the file.
	write(zf, "$ORIGIN example.net.\n$TTL 60\n@ SOA ns1 h 1 2 3 4 5\n@ NS ns1\nns1 A 192.0.2.53\n")
	if err := loadErr("routingpolicy example.org example.net {\n zonefile " + zf + "\n record www.example.org. A 60 192.0.2.1\n}"); err != nil {
		t.Errorf("a zone file of the block's second zone, inline data for the first: %v", err)
	}
	// The Corefile may give them.
	write(zf, "$ORIGIN example.org.\n$TTL 60\n@ SOA ns9.example.net. h 1 2 3 4 5\nwww A 192.0.2.1\n")
	rp, _ := newTest(t, "routingpolicy example.org {\n zonefile "+zf+"\n record @ NS 3600 ns2.example.net.\n}")
	if m := ask(t, rp, "example.org.", dns.TypeNS, "10.1.1.1"); len(m.Answer) != 1 || m.Answer[0].(*dns.NS).Ns != "ns2.example.net." {
		t.Errorf("apex NS given in the Corefile: %v", m.Answer)
	}
	// A record-set file with the SOA and no NS.
	write(rs, `[{"name": "example.org.", "type": "SOA", "rrdatas": ["ns9.example.net. h.example.org. 1 2 3 4 5"]}, {"name": "www.example.org.", "type": "A", "rrdatas": ["192.0.2.1"]}]`)
	err = loadErr("routingpolicy example.org {\n recordsets " + rs + "\n}")
	if err == nil || !strings.Contains(err.Error(), "recordsets "+rs+" gives the SOA of example.org. but no NS records at its apex") {
		t.Errorf("a record-set file with the SOA and no NS: %v", err)
	}
	// Inline, the NS is synthesized from the SOA's MNAME.
	rp, _ = newTest(t, `routingpolicy example.org {
		record @ SOA 3600 ns9.example.net. h.example.org. 1 2 3 4 5
	}`)
	if m := ask(t, rp, "example.org.", dns.TypeNS, "10.1.1.1"); len(m.Answer) != 1 || m.Answer[0].(*dns.NS).Ns != "ns9.example.net." {
		t.Errorf("inline SOA, no NS: %v, want NS ns9.example.net. synthesized", m.Answer)
	}
	// A record-set file with neither: SOA and NS synthesized, as inline.
	write(rs, `[{"name": "www.example.org.", "type": "A", "rrdatas": ["192.0.2.1"]}]`)
	rp, _ = newTest(t, "routingpolicy example.org {\n recordsets "+rs+"\n}")
	if m := ask(t, rp, "example.org.", dns.TypeNS, "10.1.1.1"); len(m.Answer) != 1 || m.Answer[0].(*dns.NS).Ns != "ns1.example.org." {
		t.Errorf("record-set file without SOA and NS: %v, want NS ns1.example.org. synthesized", m.Answer)
	}
}

// TestZoneFallthroughRZone1: R-ZONE-1, README's "Differences from file" row for `fallthrough`:
// a name that does not exist (NXDOMAIN) is passed to the next plugin, as file passes it; an empty
// non-terminal exists (RFC 4592 2.2.2, RFC 8020) and is answered NODATA, where file passes it on
// too. file is asked as well, so the row fails here when file changes.
func TestZoneFallthroughRZone1(t *testing.T) {
	const text = "$ORIGIN example.org.\n$TTL 60\n@ SOA ns1 h 1 2 3 4 5\n@ NS ns1\nns1 A 192.0.2.1\na.b A 192.0.2.2\n"
	passed := map[string]bool{}
	next := test.HandlerFunc(func(_ context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
		passed[r.Question[0].Name] = true
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeRefused)
		w.WriteMsg(m)
		return dns.RcodeRefused, nil
	})
	z, err := file.Parse(strings.NewReader(text), "example.org.", "db", 0)
	if err != nil {
		t.Fatal(err)
	}
	f := file.File{Next: next, Zones: file.Zones{Z: map[string]*file.Zone{"example.org.": z}, Names: []string{"example.org."}}, Fall: fall.Root}
	zf := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(zf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	rp, _ := newTest(t, "routingpolicy example.org {\n zonefile "+zf+"\n fallthrough\n}")
	rp.Next = next
	for _, tc := range []struct {
		name             string
		filePass, rpPass bool
	}{
		{"nx.example.org.", true, true},
		{"b.example.org.", true, false}, // the empty non-terminal
		{"a.b.example.org.", false, false},
	} {
		m := new(dns.Msg)
		m.SetQuestion(tc.name, dns.TypeAAAA)
		clear(passed)
		if _, err := f.ServeDNS(context.Background(), dnstest.NewRecorder(&test.ResponseWriter{}), m); err != nil {
			t.Fatal(err)
		}
		if passed[tc.name] != tc.filePass {
			t.Errorf("%s: file passes it on: %v, want %v (README's row is obsolete?)", tc.name, passed[tc.name], tc.filePass)
		}
		clear(passed)
		a := askMsg(t, rp, m, "10.1.1.1")
		if passed[tc.name] != tc.rpPass {
			t.Errorf("%s: routingpolicy passes it on: %v, want %v", tc.name, passed[tc.name], tc.rpPass)
		}
		if !tc.rpPass && (a.Rcode != dns.RcodeSuccess || len(a.Answer) != 0 || len(a.Ns) != 1 || a.Ns[0].Header().Rrtype != dns.TypeSOA) {
			t.Errorf("%s: routingpolicy answers %v, want NODATA", tc.name, a)
		}
	}
}

// TestZoneGlueInInnerZoneRZone2: R-ZONE-2: a cut's in-domain glue that belongs to a zone of the
// block below the cut (records go to the longest zone) is still the referral's glue, as file's
// would be with the same records in its zone (a third review found the additional section empty).
func TestZoneGlueInInnerZoneRZone2(t *testing.T) {
	rp, _ := newTest(t, `routingpolicy example.org a.b.example.org {
		record b NS 300 ns.a.b.example.org.
		record ns.a.b.example.org. A 300 192.0.2.53
	}`)
	m := ask(t, rp, "www.b.example.org.", dns.TypeA, "10.1.1.1")
	if m.Authoritative || len(m.Ns) != 1 || len(m.Extra) != 1 || m.Extra[0].(*dns.A).A.String() != "192.0.2.53" {
		t.Fatalf("referral for b.example.org: AA %v, authority %v, additional %v; want the NS and its glue", m.Authoritative, m.Ns, m.Extra)
	}
}
