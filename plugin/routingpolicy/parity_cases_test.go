package routingpolicy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
)

// servePair serves zone text through file (one server block and port) and routingpolicy
// zonefile (another) in one process, and returns a function that asks both the same question.
// A reply the client cannot read is nil.
func servePair(t *testing.T, origin, zone string) func(name string, qtype uint16) (file, rp *dns.Msg) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(path, []byte(zone), 0o600); err != nil {
		t.Fatal(err)
	}
	p1, p2 := coretest.FreePort(t), coretest.FreePort(t)
	s, err := coretest.New(fmt.Sprintf(`%s:%s {
	bind 127.0.0.1
	file %s
}
%s:%s {
	bind 127.0.0.1
	routingpolicy {
		zonefile %s
		reload 0
	}
}`, origin, p1, path, origin, p2, path))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(s.Stop)
	c := &dns.Client{}
	return func(name string, qtype uint16) (*dns.Msg, *dns.Msg) {
		t.Helper()
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		m.SetEdns0(4096, false)
		a, _, err := c.Exchange(m, "127.0.0.1:"+p1)
		if err != nil {
			t.Logf("file %s: %v", name, err)
			a = nil
		}
		b, _, err := c.Exchange(m, "127.0.0.1:"+p2)
		if err != nil {
			t.Logf("routingpolicy %s: %v", name, err)
			b = nil
		}
		return a, b
	}
}

// brief is a message as rcode, AA and sections, for failure messages.
func brief(m *dns.Msg) string {
	if m == nil {
		return "no readable reply\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s aa=%v\n", dns.RcodeToString[m.Rcode], m.Authoritative)
	for _, rr := range m.Answer {
		fmt.Fprintf(&b, "  AN %s\n", rr)
	}
	for _, rr := range m.Ns {
		fmt.Fprintf(&b, "  NS %s\n", rr)
	}
	for _, rr := range noOPT(m.Extra) {
		fmt.Fprintf(&b, "  AD %s\n", rr)
	}
	return b.String()
}

// samePair fails unless rp answers as file, up to the differences README.md lists (compare,
// for a zone with no generated cuts or wildcards).
func samePair(t *testing.T, q string, qtype uint16, file, rp *dns.Msg) {
	t.Helper()
	if file == nil || rp == nil {
		t.Errorf("%s %s: no readable reply from file (%v) or routingpolicy (%v)", q, dns.TypeToString[qtype], file != nil, rp != nil)
		return
	}
	if d := (&zoneGen{}).compare(question{name: q, qtype: qtype}, file, rp); d != "" {
		t.Errorf("%s %s: %s\nfile:\n%sroutingpolicy:\n%s", q, dns.TypeToString[qtype], d, brief(file), brief(rp))
	}
}

// TestZoneEscapedOwnerNames: R-ZONE-1: names written with master-file escapes (RFC 1035 5.1)
// that stand for plain octets are the names of their wire form, as file canonicalizes owners on
// insert: `\097bc` is `abc`, `x\046y` is `x\.y`, `\*` and `\042` are the wildcard label, and
// targets written so lead where the plain spelling leads. routingpolicy serving the escaped zone
// answers as file serving the plain one, and as file serving the escaped one except where file
// compares escaped labels as written (README, Differences from file; each checked here to still
// be one). Regression: names were keyed as written, never found, and `\042` was no wildcard.
func TestZoneEscapedOwnerNames(t *testing.T) {
	const head = `$ORIGIN example.org.
@ 3600 IN SOA ns1 hostmaster 1 7200 1800 1209600 300
@ 3600 IN NS ns1
ns1 3600 IN A 192.0.2.53
ns2 3600 IN A 192.0.2.54
printer 300 IN A 192.0.2.95
ns.sub 300 IN A 192.0.2.96
x.target 300 IN A 192.0.2.97
`
	escaped := head + `@ 3600 IN NS \110s2
\097bc 300 IN A 192.0.2.90
\065BC2 300 IN A 192.0.2.91
x\046y 300 IN A 192.0.2.92
\*.esc 300 IN A 192.0.2.93
\042.esc2 300 IN A 192.0.2.94
My\032Printer._ipp._tcp 300 IN SRV 0 0 631 \112rinter
My\032Printer._ipp._tcp 300 IN TXT "rp=ipp/print"
alias 300 IN CNAME \097bc
alias2 300 IN CNAME x\.y
mx 300 IN MX 10 \112rinter
dn 300 IN DNAME \084arget
sub 300 IN NS ns.\115ub
alias3 300 IN CNAME x.\100n
_sip._tcp.\115rv 300 IN SRV 0 0 5060 printer
`
	plain := head + `@ 3600 IN NS ns2
abc 300 IN A 192.0.2.90
ABC2 300 IN A 192.0.2.91
x\.y 300 IN A 192.0.2.92
*.esc 300 IN A 192.0.2.93
*.esc2 300 IN A 192.0.2.94
My\ Printer._ipp._tcp 300 IN SRV 0 0 631 printer
My\ Printer._ipp._tcp 300 IN TXT "rp=ipp/print"
alias 300 IN CNAME abc
alias2 300 IN CNAME x\.y
mx 300 IN MX 10 printer
dn 300 IN DNAME Target
sub 300 IN NS ns.sub
alias3 300 IN CNAME x.dn
_sip._tcp.srv 300 IN SRV 0 0 5060 printer
`
	askEscaped, askPlain := servePair(t, "example.org.", escaped), servePair(t, "example.org.", plain)
	for _, q := range []struct {
		name       string
		qtype      uint16
		fileMisses bool // a listed difference: file serving the escaped zone answers otherwise
	}{
		{"abc.example.org.", dns.TypeA, false}, {"ABC2.example.org.", dns.TypeA, false},
		{`x\.y.example.org.`, dns.TypeA, false}, {"foo.esc.example.org.", dns.TypeA, false},
		{"*.esc.example.org.", dns.TypeA, false}, {"a.b.esc2.example.org.", dns.TypeA, false},
		{`my\ printer._ipp._tcp.example.org.`, dns.TypeSRV, false}, {`My\032Printer._ipp._tcp.example.org.`, dns.TypeTXT, false},
		{"alias.example.org.", dns.TypeA, false}, {"alias2.example.org.", dns.TypeA, false},
		{"mx.example.org.", dns.TypeMX, false}, {"example.org.", dns.TypeNS, false},
		{"x.dn.example.org.", dns.TypeA, false},
		// A cut's name server escaped in the cut's labels: file leaves the glue out.
		{"www.sub.example.org.", dns.TypeA, true},
		// A CNAME target escaped in a DNAME owner's labels: file misses the DNAME (NXDOMAIN).
		{"alias3.example.org.", dns.TypeA, true},
		// An empty non-terminal above an escaped SRV owner: file says NXDOMAIN.
		{"srv.example.org.", dns.TypeA, true},
	} {
		fileEscaped, rp := askEscaped(q.name, q.qtype)
		filePlain, _ := askPlain(q.name, q.qtype)
		samePair(t, q.name+" (file on the plain zone)", q.qtype, filePlain, rp)
		if !q.fileMisses {
			samePair(t, q.name, q.qtype, fileEscaped, rp)
		} else if brief(fileEscaped) == brief(filePlain) {
			t.Errorf("%s %s: file answers the escaped zone as the plain one: the README row for it is obsolete", q.name, dns.TypeToString[q.qtype])
		}
	}
}

// TestZoneCNAMEChainLimit: R-ZONE-1: a CNAME chain is followed as far as file follows it
// (plugin/file lookup.go): 10 CNAMEs through names the zone holds, the data after 9 included;
// after the 10th, NOERROR with the apex NS set, or the referral when the next name is under a
// cut. A step through a wildcard starts the count again; an NS query through 9 CNAMEs is
// SERVFAIL, as file's loop guard makes it. Regression: the chase stopped after 8.
func TestZoneCNAMEChainLimit(t *testing.T) {
	var b strings.Builder
	b.WriteString("$ORIGIN example.org.\n@ 3600 IN SOA ns1 hostmaster 1 7200 1800 1209600 300\n@ 3600 IN NS ns1\nns1 3600 IN A 192.0.2.53\n")
	b.WriteString("sub 3600 IN NS ns.sub\nns.sub 3600 IN A 192.0.2.100\n")
	// c0 → … → c9 → c10 (data), 10 CNAMEs; s0 → … → s9 → www.sub (under a cut); w0 → … → w6 →
	// x.wild, whose wildcard goes on to c0: 7 + 10 CNAMEs, in two counts.
	for i := range 10 {
		fmt.Fprintf(&b, "c%d 60 IN CNAME c%d\n", i, i+1)
		next := fmt.Sprintf("s%d", i+1)
		if i == 9 {
			next = "www.sub"
		}
		fmt.Fprintf(&b, "s%d 60 IN CNAME %s\n", i, next)
	}
	for i := range 6 {
		fmt.Fprintf(&b, "w%d 60 IN CNAME w%d\n", i, i+1)
	}
	b.WriteString("w6 60 IN CNAME x.wild\n*.wild 60 IN CNAME c0\nc10 60 IN A 192.0.2.1\n")
	ask := servePair(t, "example.org.", b.String())
	for _, q := range []struct {
		name    string
		qtype   uint16
		answers int // file's, as a control
		rcode   int
	}{
		{"c1.example.org.", dns.TypeA, 10, dns.RcodeSuccess}, // 9 CNAMEs and the A record
		{"c0.example.org.", dns.TypeA, 10, dns.RcodeSuccess}, // 10 CNAMEs, then the limit
		{"s0.example.org.", dns.TypeA, 10, dns.RcodeSuccess}, // 10 CNAMEs, then the referral
		{"w0.example.org.", dns.TypeA, 17, dns.RcodeSuccess}, // 7, then the wildcard's and 9 more
		{"c2.example.org.", dns.TypeNS, 8, dns.RcodeSuccess},
		{"c1.example.org.", dns.TypeNS, 9, dns.RcodeServerFailure}, // file: 9 fresh lookups, then its loop guard
	} {
		file, rp := ask(q.name, q.qtype)
		if len(file.Answer) != q.answers || file.Rcode != q.rcode {
			t.Fatalf("control: file %s %s answers %d records, %s:\n%s", q.name, dns.TypeToString[q.qtype], len(file.Answer), dns.RcodeToString[file.Rcode], brief(file))
		}
		samePair(t, q.name, q.qtype, file, rp)
	}
}

// TestZoneListedDifferences: R-ZONE-1: the rows of README's "Differences from file" that the
// generated zones of TestParityWithFile cannot show, each checked both ways: file still answers
// as the row says (else the row is obsolete), and routingpolicy answers as the row says.
func TestZoneListedDifferences(t *testing.T) {
	l63 := strings.Repeat("t", 63)
	zone := `$ORIGIN example.org.
@ 3600 IN SOA ns1 hostmaster 1 7200 1800 1209600 300
@ 3600 IN NS ns1
ns1 3600 IN A 192.0.2.53
long 60 IN DNAME ` + l63 + "." + l63 + "." + l63 + `.example.net.
dn 60 IN DNAME t
www.dn 60 IN A 192.0.2.9
alias 60 IN CNAME www.dn
dup 60 IN A 192.0.2.13
dup 120 IN A 192.0.2.13
` + "\xc3\x9cber 60 IN A 192.0.2.11\nx\xff 60 IN A 192.0.2.12\n"
	ask := servePair(t, "example.org.", zone)
	for _, tc := range []struct {
		row, name string
		file      func(*dns.Msg) bool
		rp        func(*dns.Msg) bool
	}{
		{"a DNAME substitution longer than 255 octets", strings.Repeat("p", 50) + ".long.example.org.",
			func(m *dns.Msg) bool { return m == nil },
			func(m *dns.Msg) bool {
				return m != nil && m.Rcode == dns.RcodeYXDomain && len(m.Answer) == 1 && m.Answer[0].Header().Rrtype == dns.TypeDNAME
			}},
		{"a CNAME to a name below a DNAME owner that has data", "alias.example.org.",
			func(m *dns.Msg) bool {
				return m != nil && len(m.Answer) == 2 && m.Answer[1].Header().Rrtype == dns.TypeA
			},
			func(m *dns.Msg) bool {
				return m != nil && len(m.Answer) == 3 && m.Answer[1].Header().Rrtype == dns.TypeDNAME && m.Rcode == dns.RcodeNameError
			}},
		{"a record given twice", "dup.example.org.",
			func(m *dns.Msg) bool { return m != nil && len(m.Answer) == 2 },
			func(m *dns.Msg) bool { return m != nil && len(m.Answer) == 1 && m.Answer[0].Header().Ttl == 60 }},
		{"raw octets outside ASCII: upper-case UTF-8", `\195\156ber.example.org.`,
			func(m *dns.Msg) bool { return m != nil && m.Rcode == dns.RcodeNameError },
			func(m *dns.Msg) bool { return m != nil && len(m.Answer) == 1 }},
		{"raw octets outside ASCII: not UTF-8", `x\255.example.org.`,
			func(m *dns.Msg) bool { return m != nil && m.Rcode == dns.RcodeNameError },
			func(m *dns.Msg) bool { return m != nil && len(m.Answer) == 1 }},
	} {
		file, rp := ask(tc.name, dns.TypeA)
		if !tc.file(file) {
			t.Errorf("%s: file no longer answers as README says (the row is obsolete?):\n%s", tc.row, brief(file))
		}
		if !tc.rp(rp) {
			t.Errorf("%s: routingpolicy does not answer as README says:\n%s", tc.row, brief(rp))
		}
	}
	// A zone of its SOA and NS records only: file keeps them aside from its names and answers
	// NXDOMAIN for the apex's other types; the apex exists (RFC 1034 4.3.2, RFC 8020): NODATA.
	ask = servePair(t, "example.org.", "$ORIGIN example.org.\n@ 3600 IN SOA ns1.example.net. hostmaster 1 7200 1800 1209600 300\n@ 3600 IN NS ns1.example.net.\n")
	for _, qtype := range []uint16{dns.TypeA, dns.TypeTXT} {
		file, rp := ask("example.org.", qtype)
		if file == nil || file.Rcode != dns.RcodeNameError {
			t.Errorf("an apex with only SOA and NS, %s: file no longer answers NXDOMAIN (the row is obsolete?):\n%s", dns.TypeToString[qtype], brief(file))
		}
		if rp == nil || rp.Rcode != dns.RcodeSuccess || len(rp.Answer) != 0 || len(rp.Ns) != 1 || rp.Ns[0].Header().Rrtype != dns.TypeSOA {
			t.Errorf("an apex with only SOA and NS, %s: routingpolicy does not answer NODATA:\n%s", dns.TypeToString[qtype], brief(rp))
		}
	}
}

// TestZoneLoopGuardSparesApexRZone1: R-ZONE-1: file's loop guard (the 9th fresh lookup is
// SERVFAIL) comes after its answer for the apex SOA and NS: an NS query on a chain of nine
// CNAMEs to the apex (every step of an NS query is a fresh lookup) gets the CNAMEs and the apex
// NS set from both, not SERVFAIL; the same chain to another name is SERVFAIL in both.
func TestZoneLoopGuardSparesApexRZone1(t *testing.T) {
	zone := `$ORIGIN example.org.
@ 3600 IN SOA ns1 hostmaster 1 7200 1800 1209600 300
@ 3600 IN NS ns1
ns1 3600 IN A 192.0.2.53
www 300 IN A 192.0.2.1
`
	for i := 1; i <= 9; i++ {
		zone += fmt.Sprintf("a%d 300 IN CNAME a%d\nb%d 300 IN CNAME b%d\n", i, i+1, i, i+1)
	}
	zone += "a10 300 IN CNAME @\nb10 300 IN CNAME www\n"
	ask := servePair(t, "example.org.", zone)
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{"a1.example.org.", dns.TypeNS}, {"a1.example.org.", dns.TypeSOA}, {"b1.example.org.", dns.TypeNS}, {"a2.example.org.", dns.TypeNS}} {
		file, rp := ask(q.name, q.qtype)
		samePair(t, q.name, q.qtype, file, rp)
	}
}
