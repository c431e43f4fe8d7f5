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
			t.Fatalf("file %s: %v", name, err)
		}
		b, _, err := c.Exchange(m, "127.0.0.1:"+p2)
		if err != nil {
			t.Fatalf("routingpolicy %s: %v", name, err)
		}
		return a, b
	}
}

// brief is a message as rcode, AA and sections, for failure messages.
func brief(m *dns.Msg) string {
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

// samePair fails unless rp answers as file: rcode, AA and every section, up to the differences
// README.md lists (diffSection's canon).
func samePair(t *testing.T, q string, qtype uint16, file, rp *dns.Msg) {
	t.Helper()
	d := ""
	switch {
	case file.Rcode != rp.Rcode || file.Authoritative != rp.Authoritative:
		d = "rcode or AA"
	default:
		d = diffSection("answer", file.Answer, rp.Answer) + diffSection("authority", negTTL(file.Ns), rp.Ns) +
			diffSection("additional", noOPT(file.Extra), noOPT(rp.Extra))
	}
	if d != "" {
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
