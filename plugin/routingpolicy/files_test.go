package routingpolicy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	"github.com/miekg/dns"
)

func TestRecordSetsExport(t *testing.T) {
	for _, f := range []string{"testdata/export.json", "testdata/export.yaml", "testdata/export-stream.yaml"} {
		t.Run(f, func(t *testing.T) {
			rp, b := newTest(t, `routingpolicy example.org {
				region us-east1
				subnet europe-west2 10.2.0.0/16
				recordsets `+f+`
			}`)
			d := rp.data.Load()
			if len(d.policies) < 3 {
				t.Fatalf("policies: %d", len(d.policies))
			}
			// WRR: weights 100/300/0; the zero-weight item is unchecked.
			got := count(t, rp, "www.example.org.", "10.1.1.1", draws)
			within(t, "weight 100", got["198.51.100.1"], draws, 0.25)
			if got["198.51.100.9"] != 0 {
				t.Fatalf("zero weight served: %v", got)
			}
			// R-WRR-5 from the export: checked non-zero items unhealthy, the unchecked zero item answers.
			set(b, "web", "198.51.100.1", health.Unhealthy)
			set(b, "web", "198.51.100.2", health.Unhealthy)
			if got := addrs(ask(t, rp, "www.example.org.", dns.TypeA, "10.1.1.1")); got != "198.51.100.9" {
				t.Fatalf("want the zero-weight item, got %s", got)
			}
			// Geo with an ILB target (derived VIP) and fencing.
			if got := addrs(ask(t, rp, "geo.example.org.", dns.TypeA, "10.1.1.1")); got != "10.128.0.10" {
				t.Fatalf("geo us-east1: %s", got)
			}
			if got := addrs(ask(t, rp, "geo.example.org.", dns.TypeA, "10.2.1.1")); got != "10.154.0.10" {
				t.Fatalf("geo europe: %s", got)
			}
			set(b, "", "10.128.0.10", health.Unhealthy)
			if got := addrs(ask(t, rp, "geo.example.org.", dns.TypeA, "10.1.1.1")); got != "10.128.0.10" {
				t.Fatalf("fenced geo must stay: %s", got)
			}
			// Failover: trickle 0.1.
			got = count(t, rp, "fo.example.org.", "10.1.1.1", draws)
			within(t, "trickle", got["203.0.113.11"], draws, 0.1)
			for _, a := range d.policies[2].items[0].addrs {
				if !a.explicit || a.key.Check != "web" {
					t.Errorf("primary address %s not checked by web", a.key.Addr)
				}
			}
		})
	}
}

func TestRecordSetsPlainAndWarnings(t *testing.T) {
	b, err := os.ReadFile("testdata/export.json")
	if err != nil {
		t.Fatal(err)
	}
	rrs, sets, warns, err := parseRecordSets(b, "export.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(rrs) != 4 || len(sets) != 4 {
		t.Fatalf("got %d records and %d sets", len(rrs), len(sets))
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "futureField") {
		t.Fatalf("warnings: %v", warns)
	}
	rp, _ := newTest(t, `routingpolicy example.org {
		recordsets testdata/export.json
	}`)
	if got := addrs(ask(t, rp, "static.example.org.", dns.TypeA, "10.1.1.1")); got != "192.0.2.10" {
		t.Fatalf("plain record from export: %s", got)
	}
	m := ask(t, rp, "example.org.", dns.TypeNS, "10.1.1.1")
	if len(m.Answer) != 2 {
		t.Fatalf("NS from export: %v", m.Answer)
	}
}

func TestRecordSetsErrors(t *testing.T) {
	tests := []struct{ in, err string }{
		{`[{"name": "www.example.org.", "type": "A", "ttl": "thirty", "rrdatas": ["192.0.2.1"]}]`, `record set www.example.org. A: json: cannot unmarshal string`},
		{`[{"name": "www.example.org.", "type": "A", "routingPolicy": {"wrr": {"items": [{"weight": 1, "rrdatas": ["192.0.2.1"]}]}, "geo": {"items": []}}}]`, `more than one of wrr, geo and primaryBackup`},
		{`[{"name": "www", "type": "A", "rrdatas": ["192.0.2.1"]}]`, `fully qualified`},
		{`[{"name": "www.example.org.", "type": "A", "rrdatas": ["x"]}]`, `not valid A data`},
		{`[{"name": "www.example.org.", "type": "A", "routingPolicy": {"primaryBackup": {"primaryTargets": {"externalEndpoints": ["nope"]}}}}]`, `"nope" is not an IP address`},
		{`{"rrsets": 3}`, `cannot unmarshal number`},
		{"- name: [", `not JSON or YAML`},
	}
	for _, tc := range tests {
		_, _, _, err := parseRecordSets([]byte(tc.in), "f")
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: error %v, want %q", tc.in, err, tc.err)
		}
	}
	// Errors that need the region table come from load, naming the record set.
	dir := t.TempDir()
	f := filepath.Join(dir, "rs.json")
	os.WriteFile(f, []byte(`[{"name": "g.example.org.", "type": "A", "routingPolicy": {"geo": {"items": [{"location": "mars", "rrdatas": ["192.0.2.1"]}]}}}]`), 0o644)
	err := loadErr(`routingpolicy example.org {
		recordsets ` + f + `
	}`)
	if err == nil || !strings.Contains(err.Error(), `g.example.org./A`) || !strings.Contains(err.Error(), `unknown region "mars"`) {
		t.Fatalf("unknown region in file: %v", err)
	}
	os.WriteFile(f, []byte(`[{"name": "g.example.org.", "type": "A", "routingPolicy": {"wrr": {"items": [{"weight": 1001, "rrdatas": ["192.0.2.1"]}]}}}]`), 0o644)
	if err := loadErr(`routingpolicy example.org {
		recordsets ` + f + `
	}`); err == nil || !strings.Contains(err.Error(), "weight 1001 out of range 0..1000") {
		t.Fatalf("weight in file: %v", err) // R-WRR-1
	}
}

// TestRecordSetsDocumentsRZone3: R-ZONE-3, regression: a YAML stream of record sets, one a
// document after "---" (what gcloud dns record-sets export and list --format=yaml write), loaded
// its first document as an object without "rrsets": an empty zone, with no error and no warning.
// Every document is read now; a document (JSON or YAML) may be a list, an object with rrsets or
// one record set; an error names the record set, or the document where it has none.
func TestRecordSetsDocumentsRZone3(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		records  int
	}{
		{"stream", "---\nkind: dns#resourceRecordSet\nname: a.example.org.\ntype: A\nrrdatas: [192.0.2.1]\n---\nname: b.example.org.\ntype: A\nrrdatas: [192.0.2.2]\n", 2},
		{"stream with empty documents and an end marker", "---\n---\nname: a.example.org.\ntype: A\nrrdatas: [192.0.2.1]\n...\n---\n# nothing\n", 1},
		{"stream of lists", "- {name: a.example.org., type: A, rrdatas: [192.0.2.1]}\n---\n- {name: b.example.org., type: A, rrdatas: [192.0.2.2]}\n- {name: c.example.org., type: A, rrdatas: [192.0.2.3]}\n", 3},
		{"one YAML record set", "name: a.example.org.\ntype: A\nrrdatas: [192.0.2.1]\n", 1},
		{"one JSON record set", `{"kind": "dns#resourceRecordSet", "name": "a.example.org.", "type": "A", "rrdatas": ["192.0.2.1"]}`, 1},
		{"a YAML list response", "kind: dns#resourceRecordSetsListResponse\nrrsets:\n- {name: a.example.org., type: A, rrdatas: [192.0.2.1]}\n", 1},
		{"a list response that found nothing (no rrsets)", `{"kind": "dns#resourceRecordSetsListResponse", "header": {"operationId": "x"}}`, 0},
		{"the same in YAML", "kind: dns#resourceRecordSetsListResponse\n", 0},
		{"rrsets in another case, as encoding/json matches it", `{"Rrsets": [{"name": "a.example.org.", "type": "A", "rrdatas": ["192.0.2.1"]}]}`, 1},
		{"a stream in flow style", "{name: a.example.org., type: A, rrdatas: [192.0.2.1]}\n---\n{name: b.example.org., type: A, rrdatas: [192.0.2.2]}\n", 2},
		{"a directive before the first document", "%YAML 1.1\n# comment\n---\nname: a.example.org.\ntype: A\nrrdatas: [192.0.2.1]\n", 1},
		{"a marker with content, CRLF line ends", "--- {name: a.example.org., type: A, rrdatas: [192.0.2.1]}\r\n--- {name: b.example.org., type: A, rrdatas: [192.0.2.2]}\r\n", 2},
		{"a quoted key that looks like a merge (an unknown field)", `- {name: a.example.org., type: A, rrdatas: [192.0.2.1], "<<": x}` + "\n", 1},
		{"nothing", "", 0},
		{"comments only", "# nothing here\n", 0},
		{"an empty object", "{}", 0},
		{"CR line ends", "name: a.example.org.\rtype: A\r" + "rrdatas: [192.0.2.1]\r---\rname: b.example.org.\rtype: A\r" + "rrdatas: [192.0.2.2]\r", 2},
		{"NEL, LS and PS line breaks (go-yaml's, YAML 1.1)", "name: a.example.org.\ntype: A\nrrdatas: [192.0.2.1]\n---\u0085name: b.example.org.\u2028type: A\u2029rrdatas: [192.0.2.2]\n", 2},
	} {
		rrs, _, _, err := parseRecordSets([]byte(tc.in), "rs.yaml")
		if err != nil || len(rrs) != tc.records {
			t.Errorf("%s: %d records, error %v; want %d", tc.name, len(rrs), err, tc.records)
		}
	}
	for _, tc := range []struct{ in, err string }{
		{"name: a.example.org.\ntype: A\nrrdatas: [192.0.2.1]\n---\nname: b.example.org.\ntype: A\nttl: thirty\nrrdatas: [192.0.2.2]\n",
			"recordsets rs.yaml: record set b.example.org. A: json: cannot unmarshal string"}, // named by its name
		{"name: a.example.org.\n---\nname: [\n", "recordsets rs.yaml: not JSON or YAML: document 2: "},
		{"---\n42\n", "recordsets rs.yaml: want a list of record sets, an object with rrsets or one record set"},
		{"type: A\nrrdatas: [192.0.2.1]\n", `recordsets rs.yaml: record set 0: name "" must be a fully qualified name`},
		{"name: a.example.org.\ntype: A\nrrdatas: [192.0.2.1]\n---\n- {type: A, rrdatas: [192.0.2.2]}\n",
			`recordsets rs.yaml: document 2, record set 0: name "" must be a fully qualified name`},
		{"name: [\n", "recordsets rs.yaml: not JSON or YAML: yaml: line 1: "}, // one document: not numbered
		{"kind: dns#changesListResponse\nchanges: []\n", `recordsets rs.yaml: an object that is neither a record set (name, type) nor a list of them (rrsets): kind "dns#changesListResponse"`},
		{`{"rrsets": [], "RRSETS": []}`, "recordsets rs.yaml: rrsets given twice"},
		{`[{"name": "a.example.org.", "type": "A",]`, "recordsets rs.yaml: not JSON (invalid character ']'"},
		// What follows a document's end is read too (it was left out when only the first was read).
		{"name: a.example.org.\ntype: A\nrrdatas: [192.0.2.1]\n...\ngarbage: [\n", "recordsets rs.yaml: not JSON or YAML: document 2: "},
	} {
		if _, _, _, err := parseRecordSets([]byte(tc.in), "rs.yaml"); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
		}
	}
}

// TestRecordSetsSignaturesRefusedRZone3: R-ZONE-3 (types), regression: a record-set file's
// signatureRrdatas, on a record set or on a policy item, were dropped without a word and the data
// answered DO queries unsigned. They are refused, naming the record set (and the item), as a zone
// file's RRSIG records are; an empty list, what an unsigned zone's export holds, loads.
func TestRecordSetsSignaturesRefusedRZone3(t *testing.T) {
	const sig = `["A 13 3 60 20300101000000 20200101000000 12345 example.org. AAAA"]`
	const must = "signatureRrdatas given (1): signed zone data is not supported"
	for _, tc := range []struct{ in, where string }{
		{`[{"name": "www.example.org.", "type": "A", "rrdatas": ["192.0.2.1"], "signatureRrdatas": ` + sig + `}]`,
			"record set www.example.org. A: "},
		{`[{"name": "w.example.org.", "type": "A", "routingPolicy": {"wrr": {"items": [{"weight": 1, "rrdatas": ["192.0.2.1"]}, {"weight": 1, "rrdatas": ["192.0.2.2"], "signatureRrdatas": ` + sig + `}]}}}]`,
			"record set w.example.org. A: wrr item 1: "},
		{`[{"name": "g.example.org.", "type": "A", "routingPolicy": {"geo": {"items": [{"location": "us-east1", "rrdatas": ["192.0.2.1"], "signatureRrdatas": ` + sig + `}]}}}]`,
			"record set g.example.org. A: geo item 0 (us-east1): "},
		{`[{"name": "f.example.org.", "type": "A", "routingPolicy": {"primaryBackup": {"primaryTargets": {"externalEndpoints": ["192.0.2.1"]}, "backupGeoTargets": {"items": [{"location": "us-east1", "rrdatas": ["192.0.2.2"], "signatureRrdatas": ` + sig + `}]}}}}]`,
			"record set f.example.org. A: backupGeoTargets: geo item 0 (us-east1): "},
	} {
		if _, _, _, err := parseRecordSets([]byte(tc.in), "rs.json"); err == nil || !strings.Contains(err.Error(), tc.where+must) {
			t.Errorf("%s: error %v, want %q", tc.in, err, tc.where+must)
		}
	}
	rrs, sets, warns, err := parseRecordSets([]byte(`[{"name": "www.example.org.", "type": "A", "rrdatas": ["192.0.2.1"], "signatureRrdatas": []},
		{"name": "w.example.org.", "type": "A", "routingPolicy": {"wrr": {"items": [{"weight": 1, "rrdatas": ["192.0.2.2"], "signatureRrdatas": []}]}}}]`), "rs.json")
	if err != nil || len(rrs) != 1 || len(sets) != 1 || len(warns) != 0 {
		t.Fatalf("empty signatureRrdatas: %d records, %d sets, warnings %q, error %v; want 1, 1, none, nil", len(rrs), len(sets), warns, err)
	}
}

// TestRecordSetsRelativeNamesRZone3: R-ZONE-3 (names), regression: a relative name in the
// rrdatas of a record-set file was completed with the root (`web` for a CNAME served as `web.`,
// `10 mail` for an MX as `mail.`). A managed zone's export writes every name absolute, with its
// final dot: a relative one is an error naming the record set and the rrdata, in plain record
// sets and in policy items alike. Inline data keeps names relative to the zone.
func TestRecordSetsRelativeNamesRZone3(t *testing.T) {
	const must = "names in a record-set file must be absolute (end with a dot)"
	for _, tc := range []struct{ in, set, rdata string }{
		{`[{"name": "www.example.org.", "type": "CNAME", "rrdatas": ["web"]}]`, "record set www.example.org. CNAME", `"web"`},
		{`[{"name": "example.org.", "type": "MX", "rrdatas": ["10 mail.example.org.", "20 mail"]}]`, "record set example.org. MX", `"20 mail"`},
		{`[{"name": "_sip._tcp.example.org.", "type": "SRV", "rrdatas": ["1 2 5060 sip.example.org"]}]`, "record set _sip._tcp.example.org. SRV", `"1 2 5060 sip.example.org"`},
		{`[{"name": "example.org.", "type": "NS", "rrdatas": ["@"]}]`, "record set example.org. NS", `"@"`},
		{`[{"name": "www.example.org.", "type": "CNAME", "routingPolicy": {"wrr": {"items": [{"weight": 1, "rrdatas": ["web.example.org."]}, {"weight": 1, "rrdatas": ["web2"]}]}}}]`, "wrr www.example.org./CNAME", `"web2"`},
		{`[{"name": "example.org.", "type": "MX", "routingPolicy": {"geo": {"items": [{"location": "us-east1", "rrdatas": ["10 mail"]}]}}}]`, "geo example.org./MX", `"10 mail"`},
	} {
		f := filepath.Join(t.TempDir(), "rs.json")
		if err := os.WriteFile(f, []byte(tc.in), 0o600); err != nil {
			t.Fatal(err)
		}
		err := loadErr("routingpolicy example.org {\n recordsets " + f + "\n}")
		if err == nil || !strings.Contains(err.Error(), tc.set) || !strings.Contains(err.Error(), "rdata "+tc.rdata) || !strings.Contains(err.Error(), must) {
			t.Errorf("%s:\n  error %v\n  want one naming %s and %s: %s", tc.in, err, tc.set, tc.rdata, must)
		}
	}
	// Absolute names load, the root too (a null MX); inline, relative names are the zone's.
	f := filepath.Join(t.TempDir(), "rs.json")
	if err := os.WriteFile(f, []byte(`[{"name": "example.org.", "type": "MX", "rrdatas": ["0 ."]}, {"name": "example.org.", "type": "NS", "rrdatas": ["ns.example.net."]},
		{"name": "www.example.org.", "type": "CNAME", "routingPolicy": {"wrr": {"items": [{"weight": 1, "rrdatas": ["web.example.org."]}]}}},
		{"name": "web.example.org.", "type": "TXT", "rrdatas": ["\"no names here\""]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	rp, _ := newTest(t, "routingpolicy example.org {\n recordsets "+f+"\n record alias CNAME 60 web\n}")
	if m := ask(t, rp, "example.org.", dns.TypeMX, "10.1.1.1"); len(m.Answer) != 1 || m.Answer[0].(*dns.MX).Mx != "." {
		t.Errorf("null MX: %v", m.Answer)
	}
	for name, want := range map[string]string{"www.example.org.": "web.example.org.", "alias.example.org.": "web.example.org."} {
		if m := ask(t, rp, name, dns.TypeCNAME, "10.1.1.1"); len(m.Answer) != 1 || m.Answer[0].(*dns.CNAME).Target != want {
			t.Errorf("%s CNAME: %v, want %s", name, m.Answer, want)
		}
	}
}

// TestRecordSetsHealthCheckWithoutPolicyWarns: R-ZONE-3: a routingPolicy.healthCheck on a record set with no
// wrr, geo or primaryBackup checks nothing: like an unknown field it is left out with a warning
// (it was dropped silently).
func TestRecordSetsHealthCheckWithoutPolicyWarns(t *testing.T) {
	rrs, sets, warns, err := parseRecordSets([]byte(`[{"name": "www.example.org.", "type": "A", "rrdatas": ["192.0.2.1"], "routingPolicy": {"healthCheck": "projects/p/global/healthChecks/web"}}]`), "rs.json")
	if err != nil || len(rrs) != 1 || len(sets) != 0 {
		t.Fatalf("got %v, %v, %v", rrs, sets, err)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "record set www.example.org. A") || !strings.Contains(warns[0], `routingPolicy.healthCheck "projects/p/global/healthChecks/web" ignored`) {
		t.Fatalf("warnings: %q", warns)
	}
}

func TestZoneFile(t *testing.T) {
	rp, _ := newTest(t, `routingpolicy example.org {
		zonefile testdata/db.example.org
		wrr www A 60 "1=10.0.0.1"
	}`)
	m := ask(t, rp, "alias.example.org.", dns.TypeA, "10.1.1.1")
	if len(m.Answer) != 2 || addrs(m) != "10.0.0.1,CNAME:www.example.org." {
		t.Fatalf("zonefile CNAME to a policy: %v", m.Answer)
	}
	m = ask(t, rp, "nope.example.org.", dns.TypeA, "10.1.1.1")
	if m.Ns[0].(*dns.SOA).Serial != 2024010101 {
		t.Fatalf("SOA from the zone file: %v", m.Ns)
	}
}

func TestReloadKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "rs.yaml")
	write := func(s string, mod time.Time) {
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(f, mod, mod)
	}
	write("- {name: www.example.org., type: A, ttl: 30, routingPolicy: {wrr: {items: [{weight: 1, rrdatas: [10.0.0.1]}]}}}\n", fixedNow)
	rp, b := newTest(t, `routingpolicy example.org {
		reload 0
		recordsets `+f+`
	}`)
	if got := one(t, rp, "10.1.1.1"); got != "10.0.0.1" {
		t.Fatalf("before: %s", got)
	}
	// A broken file keeps the last good data.
	write("- {name: www.example.org., type: A, routingPolicy: {wrr: {items: [{weight: 5000, rrdatas: [10.0.0.2]}]}}}\n", fixedNow.Add(time.Second))
	if rp.reloadIfChanged(fixedNow) {
		t.Fatal("broken file loaded")
	}
	if got := one(t, rp, "10.1.1.1"); got != "10.0.0.1" {
		t.Fatalf("after a broken reload: %s", got)
	}
	// A good change is served; board targets move with it.
	write("- {name: www.example.org., type: A, routingPolicy: {wrr: {items: [{weight: 1, rrdatas: [10.0.0.2]}]}}}\n", fixedNow.Add(2*time.Second))
	if !rp.reloadIfChanged(fixedNow) {
		t.Fatal("good file not loaded")
	}
	if got := one(t, rp, "10.1.1.1"); got != "10.0.0.2" {
		t.Fatalf("after reload: %s", got)
	}
	if a := rp.data.Load().policies[0].items[0].addrs[0]; a.t == nil || a.t.Key().Addr.String() != "10.0.0.2" {
		t.Fatalf("board target after reload: %+v", a.t)
	}
	// H-6: the board holds what is served, and nothing of the data the reload replaced.
	if !coretest.Held(b, health.Key{Addr: mustAddr("10.0.0.2")}) || coretest.Held(b, health.Key{Addr: mustAddr("10.0.0.1")}) {
		t.Fatalf("board after reload: 10.0.0.2 held %v, 10.0.0.1 held %v; want only the served one",
			coretest.Held(b, health.Key{Addr: mustAddr("10.0.0.2")}), coretest.Held(b, health.Key{Addr: mustAddr("10.0.0.1")}))
	}
	if rp.reloadIfChanged(fixedNow) {
		t.Fatal("unchanged file reloaded")
	}
}

// HC-4 (issue 11, item 3): a load balancer listed in healthCheckedTargets.internalLoadBalancers is
// a VIP whose health derives from its backends, never probed by the record set's check, whether
// or not external endpoints are listed beside it: the same data gives one behaviour.
func TestInternalLoadBalancersAreDerivedHC4(t *testing.T) {
	for name, targets := range map[string]string{
		"load balancers only": `{"internalLoadBalancers": [{"ipAddress": "10.128.0.10"}]}`,
		"with an endpoint":    `{"internalLoadBalancers": [{"ipAddress": "10.128.0.10"}], "externalEndpoints": ["198.51.100.1"]}`,
	} {
		t.Run(name, func(t *testing.T) {
			body := `[{"name": "www.example.org.", "type": "A", "ttl": 30, "routingPolicy": {"healthCheck": "web", "geo": {"items": [` +
				`{"location": "us-east1", "healthCheckedTargets": ` + targets + `}]}}}]`
			_, sets, _, err := parseRecordSets([]byte(body), "rs.json")
			if err != nil {
				t.Fatal(err)
			}
			d, err := build([]string{"example.org."}, mustLocator(t), nil, sets, fixedNow)
			if err != nil {
				t.Fatal(err)
			}
			d.policies[0].each(func(a *addr) {
				ilb := a.key.Addr == mustAddr("10.128.0.10")
				if ilb && (a.explicit || a.key.Check != "") {
					t.Errorf("the load balancer %s is probed by the check (key %v)", a.key.Addr, a.key)
				}
				if !ilb && (!a.explicit || a.key.Check != "web") {
					t.Errorf("the endpoint %s is not probed by the check (key %v)", a.key.Addr, a.key)
				}
			})
		})
	}
}
