package routingpolicy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
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
// a query for every record set without panicking (R-ZONE-3). The committed corpus
// (testdata/fuzz/FuzzRecordSets) holds the shapes that once panicked: more than 128 items.
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
	f.Fuzz(func(_ *testing.T, b []byte) {
		rrs, sets, _, err := parseRecordSets(b, "fuzz")
		if err != nil {
			return
		}
		d, err := build([]string{"."}, loc, rrs, sets, fixedNow)
		if err != nil {
			return
		}
		for _, s := range sets {
			askData(d, loc, s.name, s.qtype)
			askData(d, loc, "x."+s.name, s.qtype)
		}
	})
}

// FuzzZoneFile: any zone file that loads answers queries at, below and beside its names without
// panicking (R-ZONE-3): cuts, wildcards, DNAMEs and CNAME chains included.
func FuzzZoneFile(f *testing.F) {
	f.Add([]byte("$ORIGIN example.org.\n@ SOA ns1 h 1 2 3 4 5\nsub NS ns.sub\nns.sub A 192.0.2.1\n*.w A 192.0.2.2\na.*.e TXT x\n"))
	f.Add([]byte("$ORIGIN example.org.\na CNAME b.w\n*.w CNAME c\nc MX 10 a\ndn DNAME t\nx.t A 192.0.2.3\n"))
	f.Add([]byte("$ORIGIN example.org.\n@ DNAME example.net.\n@ NS ns.example.net.\n* A 192.0.2.4\n"))
	f.Add([]byte("$ORIGIN example.org.\na CNAME b\nb CNAME a\n"))
	loc := mustLocator(f)
	f.Fuzz(func(_ *testing.T, b []byte) {
		rrs, err := parseZoneFile(b, "fuzz", "example.org.")
		if err != nil {
			return
		}
		d, err := build([]string{"example.org."}, loc, rrs, nil, fixedNow)
		if err != nil {
			return
		}
		for _, rr := range rrs {
			for _, qt := range []uint16{dns.TypeA, dns.TypeNS, dns.TypeDS, dns.TypeCNAME, dns.TypeANY} {
				askData(d, loc, rr.Header().Name, qt)
				askData(d, loc, "x."+rr.Header().Name, qt)
			}
		}
	})
}

// askData looks name up in d as ServeDNS would.
func askData(d *data, loc *region.Locator, name string, qtype uint16) {
	name = strings.ToLower(name)
	if _, ok := dns.IsDomainName(name); !ok {
		return
	}
	z := d.match(name)
	if z == nil {
		return
	}
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	src := source{loc: loc, w: &test.ResponseWriter{}, r: m, id: region.None}
	var us [maxUsed]used
	r := rand.New(rand.NewPCG(1, 2))
	z.lookup(m, name, qtype, &src, r.Uint64, &us)
	if _, err := m.Pack(); err != nil && !strings.Contains(err.Error(), "too long") {
		panic(fmt.Sprintf("answer to %s does not pack: %v\n%v", name, err, m))
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
