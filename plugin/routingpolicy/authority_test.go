package routingpolicy

import (
	"context"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
)

const authBlock = `routingpolicy example.org {
	record @ SOA 3600 ns1.example.org. admin.example.org. 1 7200 1800 86400 60
	record @ NS 3600 ns1.example.org.
	record ns1 A 300 192.0.2.53
	record plain A 300 192.0.2.1
	record plain A 300 192.0.2.2
	record alias CNAME 300 www
	record out CNAME 300 www.example.net.
	record dangling CNAME 300 nothere
	record txt TXT 300 "hello world"
	record a.b.deep A 300 192.0.2.9
	wrr www A 60 "1=10.0.0.1;1=10.0.0.2"
	wrr mx MX 60 "1=10 mail1.example.org.;0=20 mail2.example.org."
	wrr walias CNAME 60 "1=www"
}`

func TestAuthority(t *testing.T) {
	rp, _ := newTest(t, authBlock)
	soa := test.SOA("example.org. 60 IN SOA ns1.example.org. admin.example.org. 1 7200 1800 86400 60")
	ns := test.NS("example.org. 3600 IN NS ns1.example.org.")
	cases := []test.Case{
		{Qname: "plain.example.org.", Qtype: dns.TypeA,
			Answer: []dns.RR{test.A("plain.example.org. 300 IN A 192.0.2.1"), test.A("plain.example.org. 300 IN A 192.0.2.2")},
			Ns:     []dns.RR{ns}},
		// NODATA: SOA in authority, NOERROR.
		{Qname: "plain.example.org.", Qtype: dns.TypeAAAA, Ns: []dns.RR{soa}},
		// NXDOMAIN.
		{Qname: "nope.example.org.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{soa}},
		// Empty non-terminal: NODATA.
		{Qname: "b.deep.example.org.", Qtype: dns.TypeA, Ns: []dns.RR{soa}},
		// In-zone CNAME chased.
		{Qname: "alias.example.org.", Qtype: dns.TypeCNAME,
			Answer: []dns.RR{test.CNAME("alias.example.org. 300 IN CNAME www.example.org.")}, Ns: []dns.RR{ns}},
		{Qname: "out.example.org.", Qtype: dns.TypeA,
			Answer: []dns.RR{test.CNAME("out.example.org. 300 IN CNAME www.example.net.")}, Ns: []dns.RR{ns}},
		{Qname: "dangling.example.org.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError,
			Answer: []dns.RR{test.CNAME("dangling.example.org. 300 IN CNAME nothere.example.org.")}, Ns: []dns.RR{soa}},
		{Qname: "txt.example.org.", Qtype: dns.TypeTXT,
			Answer: []dns.RR{test.TXT(`txt.example.org. 300 IN TXT "hello world"`)}, Ns: []dns.RR{ns}},
		{Qname: "example.org.", Qtype: dns.TypeSOA,
			Answer: []dns.RR{test.SOA("example.org. 3600 IN SOA ns1.example.org. admin.example.org. 1 7200 1800 86400 60")}, Ns: []dns.RR{ns}},
	}
	for _, tc := range cases {
		m := askMsg(t, rp, tc.Msg(), "10.1.1.1")
		if !m.Authoritative {
			t.Errorf("%s: AA not set", tc.Qname)
		}
		if err := test.SortAndCheck(m, tc); err != nil {
			t.Errorf("%s %s: %v", tc.Qname, dns.TypeToString[tc.Qtype], err)
		}
	}
}

func TestAuthorityPolicyCNAMEChase(t *testing.T) {
	rp, _ := newTest(t, authBlock)
	m := ask(t, rp, "alias.example.org.", dns.TypeA, "10.1.1.1")
	if len(m.Answer) != 2 || m.Answer[0].Header().Rrtype != dns.TypeCNAME {
		t.Fatalf("want CNAME + one WRR bucket, got %v", m.Answer)
	}
	m = ask(t, rp, "walias.example.org.", dns.TypeA, "10.1.1.1")
	if len(m.Answer) != 2 || m.Answer[0].(*dns.CNAME).Target != "www.example.org." {
		t.Fatalf("policy CNAME not chased: %v", m.Answer)
	}
	m = ask(t, rp, "mx.example.org.", dns.TypeMX, "10.1.1.1")
	if len(m.Answer) != 1 || m.Answer[0].(*dns.MX).Mx != "mail1.example.org." {
		t.Fatalf("MX WRR: want the weight-1 item, got %v", m.Answer)
	}
}

func TestAuthorityANYAndEDNS(t *testing.T) {
	rp, _ := newTest(t, authBlock)
	// RFC 8482: one HINFO.
	m := ask(t, rp, "plain.example.org.", dns.TypeANY, "10.1.1.1")
	if len(m.Answer) != 1 || m.Answer[0].(*dns.HINFO).Cpu != "RFC8482" {
		t.Fatalf("ANY: want one RFC8482 HINFO, got %v", m.Answer)
	}
	q := new(dns.Msg)
	q.SetQuestion("plain.example.org.", dns.TypeA)
	q.SetEdns0(1232, true)
	m = askMsg(t, rp, q, "10.1.1.1")
	o := m.IsEdns0()
	if o == nil || o.UDPSize() != 1232 || !o.Do() {
		t.Fatalf("EDNS0 not echoed: %v", m.Extra)
	}
}

func TestAuthoritySynthesizedSOA(t *testing.T) {
	rp, _ := newTest(t, `routingpolicy example.org {
		record www A 300 192.0.2.1
	}`)
	m := ask(t, rp, "example.org.", dns.TypeNS, "10.1.1.1")
	if len(m.Answer) != 1 || m.Answer[0].(*dns.NS).Ns != "ns1.example.org." {
		t.Fatalf("synthesized NS: %v", m.Answer)
	}
	m = ask(t, rp, "nope.example.org.", dns.TypeA, "10.1.1.1")
	if m.Rcode != dns.RcodeNameError || len(m.Ns) != 1 || m.Ns[0].(*dns.SOA).Serial != uint32(fixedNow.Unix()) {
		t.Fatalf("synthesized SOA in NXDOMAIN: %v", m)
	}
}

// TestAuthorityNotOurZone: R-ZONE-1: a name in no zone of the block is not ours: it goes to the
// next plugin; with none, it is REFUSED (returned for the server to write, nothing written), as
// file refuses it: an authoritative server without the zone (was SERVFAIL, which also turned a
// chased CNAME's answer into SERVFAIL where file's stays NOERROR).
func TestAuthorityNotOurZone(t *testing.T) {
	rp, _ := newTest(t, authBlock)
	m := new(dns.Msg)
	m.SetQuestion("www.example.net.", dns.TypeA)
	w := dnstest.NewRecorder(&test.ResponseWriter{})
	rcode, err := rp.ServeDNS(context.Background(), w, m)
	if rcode != dns.RcodeRefused || err != nil || w.Msg != nil {
		t.Fatalf("no next plugin: rcode %s, error %v, written %v; want REFUSED, no error and nothing written", dns.RcodeToString[rcode], err, w.Msg)
	}
	rp.Next = coretest.Echo
	if a := ask(t, rp, "www.example.net.", dns.TypeA, "10.1.1.1"); a.Rcode != dns.RcodeSuccess || a.Authoritative || len(a.Answer) != 0 || len(a.Ns) != 0 {
		t.Fatalf("with a next plugin: %v, want its empty NOERROR", a)
	}
}
