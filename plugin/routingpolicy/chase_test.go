package routingpolicy_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
)

// TestChaseOutOfZoneRZone1: R-ZONE-1: a CNAME chain that leaves the zone is completed as file
// completes it, through the server: into another zone of the same block, into a file zone, with
// the rcode of the name it leads to (NXDOMAIN, NODATA with the SOA), with a policy's CNAME item
// too; a loop through two zones of the block ends at the 9th pass in SERVFAIL, as file's does;
// a name no zone of the server holds leaves the CNAME as the answer (NOERROR).
func TestChaseOutOfZoneRZone1(t *testing.T) {
	dir := t.TempDir()
	net := filepath.Join(dir, "db.example.net")
	if err := os.WriteFile(net, []byte(`example.net. 3600 IN SOA ns.example.net. h.example.net. 1 7200 1800 1209600 300
example.net. 3600 IN NS ns.example.net.
www.example.net. 300 IN A 198.51.100.12
mx.example.net. 300 IN MX 10 mail.example.org.
`+bigTXT("big.example.net.", 5)), 0o600); err != nil {
		t.Fatal(err)
	}
	port := coretest.FreePort(t)
	s, err := coretest.New(fmt.Sprintf(`example.org:%[1]s example.com:%[1]s example.net:%[1]s {
	bind 127.0.0.1
	routingpolicy example.org example.com {
		record www CNAME 300 www.example.com.
		record www.example.com. A 300 192.0.2.1
		record tonet CNAME 300 www.example.net.
		record tonx CNAME 300 nx.example.net.
		record tonodata CNAME 300 www.example.net.
		record tomx CNAME 300 mx.example.net.
		record mail A 300 192.0.2.25
		record away CNAME 300 www.example.invalid.
		record tobig CNAME 300 big.example.net.
		record loop CNAME 300 loop.example.com.
		record loop.example.com. CNAME 300 loop.example.org.
		wrr pol CNAME 300 "1=www.example.net."
	}
	file %[2]s example.net
}`, port, net))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(s.Stop)
	addr := "127.0.0.1:" + port
	ask := func(name string, qtype uint16) *dns.Msg {
		t.Helper()
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		r, err := dns.Exchange(m, addr)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		qtype  uint16
		rcode  int
		answer []string // the records' types and data, in order
		soa    bool     // the SOA in authority
		extra  int
	}{
		{"www.example.org.", dns.TypeA, dns.RcodeSuccess, []string{"CNAME www.example.com.", "A 192.0.2.1"}, false, 0},
		{"tonet.example.org.", dns.TypeA, dns.RcodeSuccess, []string{"CNAME www.example.net.", "A 198.51.100.12"}, false, 0},
		{"pol.example.org.", dns.TypeA, dns.RcodeSuccess, []string{"CNAME www.example.net.", "A 198.51.100.12"}, false, 0},
		{"tonx.example.org.", dns.TypeA, dns.RcodeNameError, []string{"CNAME nx.example.net."}, true, 0},
		{"tonodata.example.org.", dns.TypeTXT, dns.RcodeSuccess, []string{"CNAME www.example.net."}, true, 0},
		// The MX found in example.net has a target in this zone: its address in additional.
		{"tomx.example.org.", dns.TypeMX, dns.RcodeSuccess, []string{"CNAME mx.example.net.", "MX 10 mail.example.org."}, false, 1},
		{"away.example.org.", dns.TypeA, dns.RcodeSuccess, []string{"CNAME www.example.invalid."}, false, 0},
	} {
		r := ask(tc.name, tc.qtype)
		got := make([]string, 0, len(r.Answer))
		for _, rr := range r.Answer {
			got = append(got, dns.TypeToString[rr.Header().Rrtype]+" "+rdata(rr))
		}
		if r.Rcode != tc.rcode || fmt.Sprint(got) != fmt.Sprint(tc.answer) || !r.Authoritative {
			t.Errorf("%s %s: %s aa=%v %v, want %s aa=true %v", tc.name, dns.TypeToString[tc.qtype],
				dns.RcodeToString[r.Rcode], r.Authoritative, got, dns.RcodeToString[tc.rcode], tc.answer)
		}
		if soa := len(r.Ns) == 1 && r.Ns[0].Header().Rrtype == dns.TypeSOA; soa != tc.soa {
			t.Errorf("%s: authority %v, want the SOA: %v", tc.name, r.Ns, tc.soa)
		}
		if len(r.Extra) != tc.extra {
			t.Errorf("%s: additional %v, want %d records", tc.name, r.Extra, tc.extra)
		}
	}
	// Five TXT records of 180 octets do not fit a 512-octet answer: the lookup through the
	// server keeps two and sets TC; the CNAME and those two fit, and the answer says it is
	// truncated (file's would not).
	r := ask("tobig.example.org.", dns.TypeTXT)
	if !r.Truncated || len(r.Answer) != 3 {
		t.Errorf("tobig TXT without EDNS: TC %v with %d records, want TC and the CNAME with what fitted:\n%v", r.Truncated, len(r.Answer), r)
	}
	// The loop: loop.example.org → loop.example.com → loop.example.org ..., each step a pass
	// through the server (the other zone); the 9th pass is SERVFAIL, and the CNAMEs so far.
	r = ask("loop.example.org.", dns.TypeA)
	if r.Rcode != dns.RcodeServerFailure || len(r.Answer) != 9 {
		t.Errorf("loop: %s with %d CNAMEs, want SERVFAIL with 9:\n%v", dns.RcodeToString[r.Rcode], len(r.Answer), r)
	}
}

// rdata is rr's data as its presentation form writes it.
func rdata(rr dns.RR) string {
	h := rr.Header().String()
	return rr.String()[len(h):]
}

// TestChaseKeepsECSScopeL1: L-1 through a chase: a CNAME to a geo policy of another zone of the
// block, asked with a client subnet, is answered with the policy's choice for that subnet and
// carries the scope (RFC 7871 7.2.1), as the policy's own name does; without it a resolver
// would cache one region's address for every client.
func TestChaseKeepsECSScopeL1(t *testing.T) {
	port := coretest.FreePort(t)
	s, err := coretest.New(fmt.Sprintf(`example.org:%[1]s example.net:%[1]s {
	bind 127.0.0.1
	routingpolicy example.org example.net {
		public
		region us-east1
		subnet europe-west1 10.2.0.0/16
		record www CNAME 300 app.example.net.
		geo app.example.net. A 60 "us-east1=192.0.2.1;europe-west1=192.0.2.2"
	}
}`, port))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(s.Stop)
	for _, name := range []string{"app.example.net.", "www.example.org."} {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		m.SetEdns0(1232, false)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.ParseIP("10.2.3.0").To4()})
		r, err := dns.Exchange(m, "127.0.0.1:"+port)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		last, _ := r.Answer[len(r.Answer)-1].(*dns.A)
		if last == nil || last.A.String() != "192.0.2.2" {
			t.Errorf("%s from 10.2.3.0/24: %v, want europe-west1's 192.0.2.2", name, r.Answer)
		}
		var scope *dns.EDNS0_SUBNET
		if o := r.IsEdns0(); o != nil {
			for _, opt := range o.Option {
				scope, _ = opt.(*dns.EDNS0_SUBNET)
			}
		}
		if scope == nil || scope.SourceScope != 24 {
			t.Errorf("%s: ECS in the answer %v, want scope 24", name, scope)
		}
	}
}

// bigTXT returns n TXT records at name, of 180 octets of text each.
func bigTXT(name string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s 300 IN TXT \"%d%s\"\n", name, i, strings.Repeat("x", 179))
	}
	return b.String()
}

// TestChaseIntoInnerZoneRZone1: R-ZONE-1, RFC 1034 4.3.2 step 3a (a CNAME's target is searched
// for from step 1, in the nearest zone): a CNAME of example.org to a name of sub.example.org,
// another zone of the same block, is answered from sub.example.org, not looked up among
// example.org's names (where it was NXDOMAIN, or a wildcard of example.org's).
func TestChaseIntoInnerZoneRZone1(t *testing.T) {
	port := coretest.FreePort(t)
	s, err := coretest.New(fmt.Sprintf(`example.org:%[1]s sub.example.org:%[1]s {
	bind 127.0.0.1
	routingpolicy example.org sub.example.org {
		record www CNAME 300 app.sub.example.org.
		record * TXT 300 "example.org's wildcard"
		record app.sub.example.org. A 300 192.0.2.7
		record app.sub.example.org. TXT 300 "sub"
	}
}`, port))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(s.Stop)
	for _, tc := range []struct {
		qtype uint16
		last  string
	}{{dns.TypeA, "192.0.2.7"}, {dns.TypeTXT, `"sub"`}} {
		m := new(dns.Msg)
		m.SetQuestion("www.example.org.", tc.qtype)
		r, err := dns.Exchange(m, "127.0.0.1:"+port)
		if err != nil {
			t.Fatal(err)
		}
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 || !strings.HasSuffix(r.Answer[1].String(), tc.last) {
			t.Errorf("www.example.org. %s: %s %v, want the CNAME and %s", dns.TypeToString[tc.qtype], dns.RcodeToString[r.Rcode], r.Answer, tc.last)
		}
	}
}

// TestChaseEdgesRZone1: R-ZONE-1, the edges of a chase a review found. A CNAME to a name no zone
// of the server holds, with routingpolicy the last plugin, stays NOERROR with the CNAME (the
// lookup is REFUSED, as file refuses it; it was SERVFAIL). A lookup through the server truncated
// only in its authority section does not make the answer truncated (TC would send the client to
// TCP for nothing). A zone of the block below a cut of this one is not chased into: the cut's
// referral answers, as file's does.
func TestChaseEdgesRZone1(t *testing.T) {
	dir := t.TempDir()
	net := filepath.Join(dir, "db.example.net")
	zone := "example.net. 3600 IN SOA ns.example.net. h.example.net. 1 7200 1800 1209600 300\n" +
		"www.example.net. 300 IN A 198.51.100.12\n"
	for i := range 30 {
		zone += fmt.Sprintf("example.net. 3600 IN NS name-server-%02d-with-a-long-first-label.example.com.\n", i)
	}
	if err := os.WriteFile(net, []byte(zone), 0o600); err != nil {
		t.Fatal(err)
	}
	port, port2 := coretest.FreePort(t), coretest.FreePort(t)
	s, err := coretest.New(fmt.Sprintf(`example.org:%[1]s example.net:%[1]s a.b.example.org:%[1]s {
	bind 127.0.0.1
	routingpolicy example.org a.b.example.org {
		record w CNAME 300 www.example.net.
		record b NS 300 ns.example.com.
		record tocut CNAME 300 x.a.b.example.org.
		record x.a.b.example.org. A 300 192.0.2.9
	}
	file %[2]s example.net
}
.:%[3]s {
	bind 127.0.0.1
	routingpolicy example.org {
		record away CNAME 300 www.example.com.
	}
}`, port, net, port2))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(s.Stop)
	ask := func(port, name string) *dns.Msg {
		t.Helper()
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		r, err := dns.Exchange(m, "127.0.0.1:"+port)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	if r := ask(port2, "away.example.org."); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("away: %s %v, want NOERROR with the CNAME", dns.RcodeToString[r.Rcode], r.Answer)
	}
	if r := ask(port, "w.example.org."); r.Truncated || len(r.Answer) != 2 {
		t.Errorf("w: TC %v %v, want the CNAME and the address, not truncated", r.Truncated, r.Answer)
	}
	if r := ask(port, "tocut.example.org."); len(r.Answer) != 1 || len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeNS {
		t.Errorf("tocut: %v %v, want the CNAME and the referral of b.example.org", r.Answer, r.Ns)
	}
}
