package routingpolicy

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	"github.com/miekg/dns"
)

// seriesNames returns the sorted distinct record sets (or, for reloads_total, results) of the
// series of metric for zone.
func seriesNames(t *testing.T, metric, zone string) []string {
	t.Helper()
	var out []string
	for _, l := range coretest.Series(t, metric) {
		if l["zone"] == zone {
			out = append(out, l["name"]+l["result"])
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// shareItems returns the sorted items of the wrr_configured_share series of record set name.
func shareItems(t *testing.T, zone, name string) []string {
	t.Helper()
	var out []string
	for _, l := range coretest.Series(t, "coredns_routingpolicy_wrr_configured_share") {
		if l["zone"] == zone && l["name"] == name {
			out = append(out, l["item"])
		}
	}
	slices.Sort(out)
	return out
}

// reloadFile returns a handler serving the record-set file it writes with write.
func reloadFile(t *testing.T, zone, first string) (*RoutingPolicy, *health.Board, func(body string)) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "rs.yaml")
	version := 0
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		version++
		when := fixedNow.Add(time.Duration(version) * time.Second)
		if err := os.Chtimes(f, when, when); err != nil {
			t.Fatal(err)
		}
	}
	write(first)
	rp, b := newTest(t, `routingpolicy `+zone+` {
		reload 0
		recordsets `+f+`
	}`)
	return rp, b, write
}

// H-6 (issue 11, item 6): the series of a record set that a file reload removes are deleted, those
// of the sets it keeps stay, and everything goes at shutdown.
func TestFileReloadDeletesSeriesH6(t *testing.T) {
	const zone = "series.test."
	rp, _, write := reloadFile(t, zone, `
- {name: a.series.test., type: A, routingPolicy: {wrr: {items: [{weight: 1, rrdatas: [10.0.0.1]}, {weight: 3, rrdatas: [10.0.0.2]}]}}}
- {name: b.series.test., type: A, routingPolicy: {wrr: {items: [{weight: 1, rrdatas: [10.0.0.3]}]}}}
`)
	for _, n := range []string{"a.series.test.", "b.series.test."} {
		ask(t, rp, n, dns.TypeA, "10.1.1.1")
	}
	both := []string{"a.series.test./A", "b.series.test./A"}
	for _, m := range []string{"coredns_routingpolicy_wrr_configured_share", "coredns_routingpolicy_answers_total"} {
		if got := seriesNames(t, m, zone); !slices.Equal(got, both) {
			t.Fatalf("%s before the reload: %v", m, got)
		}
	}
	write(`- {name: a.series.test., type: A, routingPolicy: {wrr: {items: [{weight: 1, rrdatas: [10.0.0.1]}]}}}
`)
	if !rp.reloadIfChanged(fixedNow) {
		t.Fatal("the file was not reloaded")
	}
	ask(t, rp, "a.series.test.", dns.TypeA, "10.1.1.1")
	for _, m := range []string{"coredns_routingpolicy_wrr_configured_share", "coredns_routingpolicy_answers_total"} {
		if got := seriesNames(t, m, zone); !slices.Equal(got, []string{"a.series.test./A"}) {
			t.Errorf("%s after the reload removed b: %v", m, got)
		}
	}
	// The item the reload removed (a's second) goes too.
	if v := shareItems(t, zone, "a.series.test./A"); !slices.Equal(v, []string{"0"}) {
		t.Errorf("wrr_configured_share items of a after the reload: %v", v)
	}
	rp.OnShutdown()
	for _, m := range []string{"coredns_routingpolicy_wrr_configured_share", "coredns_routingpolicy_answers_total", "coredns_routingpolicy_reloads_total"} {
		if got := seriesNames(t, m, zone); len(got) != 0 {
			t.Errorf("%s after shutdown: %v", m, got)
		}
	}
}

// H-6 (issue 11, item 6): wrr_configured_share is exported for data that loaded, not for data
// that a check then refuses (R-SEC-1 with dnssec).
func TestConfiguredShareOnlyForLoadedDataH6(t *testing.T) {
	const zone = "share.test."
	rp, b, write := reloadFile(t, zone, `- {name: ok.share.test., type: A, routingPolicy: {wrr: {items: [{weight: 1, rrdatas: [10.0.0.1]}]}}}
`)
	rp.dnssec = true
	// 10.0.0.5 is a load-balancer VIP (checked), 10.0.0.6 is not: with dnssec, a policy cannot mix them.
	set(b, "", "10.0.0.5", health.Healthy)
	write(`- {name: ok.share.test., type: A, routingPolicy: {wrr: {items: [{weight: 1, rrdatas: [10.0.0.1]}]}}}
- {name: refused.share.test., type: A, routingPolicy: {wrr: {items: [{weight: 1, rrdatas: [10.0.0.5]}, {weight: 1, rrdatas: [10.0.0.6]}]}}}
`)
	if rp.reloadIfChanged(fixedNow) {
		t.Fatal("data breaking R-SEC-1 was loaded")
	}
	if got := seriesNames(t, "coredns_routingpolicy_wrr_configured_share", zone); !slices.Equal(got, []string{"ok.share.test./A"}) {
		t.Errorf("wrr_configured_share names %v, want only the loaded data's", got)
	}
	if got := addrs(ask(t, rp, "refused.share.test.", dns.TypeA, "10.1.1.1")); strings.Contains(got, "10.0.0.5") {
		t.Errorf("the refused data is served: %s", got)
	}
}

// H-6 and R-WRR-3, the newest-writer rule: during a reload's overlap a file reload of the old
// instance does not write the configured shares over the new instance's (the newest instance
// writes, however late the other joins); when the new instance is abandoned, the old one's
// current data writes them again.
func TestOldInstanceFileReloadKeepsTheNewSharesH6(t *testing.T) {
	const zone = "shares.test."
	old, b, write := reloadFile(t, zone, `- {name: www.shares.test., type: A, routingPolicy: {wrr: {items: [{weight: 1, rrdatas: [10.0.0.1]}, {weight: 1, rrdatas: [10.0.0.2]}]}}}
`)
	old.gen = 1 // its instance is older than next's
	c := caddy.NewTestController("dns", `routingpolicy shares.test {
		wrr www A 30 "3=10.0.0.1;1=10.0.0.2"
	}`)
	cfgs, err := parse(c)
	if err != nil {
		t.Fatal(err)
	}
	d, err := cfgs[0].load(fixedNow)
	if err != nil {
		t.Fatal(err)
	}
	next := New(cfgs[0], d)
	next.board, next.gen = b, 2
	if err := next.OnStartup(nil); err != nil {
		t.Fatal(err)
	}
	share := func() float64 { return value(t, wrrConfiguredShare.WithLabelValues(zone, "www.shares.test./A", "0")) }
	if got := share(); got != 0.75 {
		t.Fatalf("share of item 0 with the new instance running: %v, want 0.75", got)
	}
	write(`- {name: www.shares.test., type: A, routingPolicy: {wrr: {items: [{weight: 1, rrdatas: [10.0.0.1]}, {weight: 4, rrdatas: [10.0.0.2]}]}}}
`)
	if !old.reloadIfChanged(fixedNow) {
		t.Fatal("the old instance's file was not reloaded")
	}
	if got := share(); got != 0.75 {
		t.Fatalf("share of item 0 after the old instance's file reload: %v, want the new instance's 0.75", got)
	}
	if err := next.OnShutdown(); err != nil { // the reload failed: the new instance is abandoned
		t.Fatal(err)
	}
	if got := share(); got != 0.2 {
		t.Fatalf("share of item 0 after the new instance left: %v, want the old instance's current 0.2", got)
	}
}

// outboundStub stands for outbound in a server block's chain: it forwards the names under zone.
type outboundStub struct {
	stub
	zone string
}

func (o *outboundStub) Forwards(name string) bool { return dns.IsSubDomain(o.zone, name) }

// startBesideOutbound starts rp (with a board of its own) in a server block whose chain has
// outbound after it, forwarding the names under forwarded, and returns what OnStartup returns.
func startBesideOutbound(t *testing.T, rp *RoutingPolicy, forwarded string) error {
	t.Helper()
	rp.board = health.NewBoard(countingClock())
	conf := &dnsserver.Config{Zone: "example.org.", Port: "53"}
	conf.AddPlugin(func(plugin.Handler) plugin.Handler { return rp })
	conf.AddPlugin(func(next plugin.Handler) plugin.Handler {
		return &outboundStub{stub: stub{name: "outbound", next: next}, zone: forwarded}
	})
	if _, err := dnsserver.NewServer("dns://:53", []*dnsserver.Config{conf}); err != nil {
		t.Fatal(err)
	}
	return rp.OnStartup(conf)
}

// versionWriter returns a function that writes body to f as its version: modification time
// fixedNow + version seconds, so each version is a change the reload check sees.
func versionWriter(t *testing.T, f string) func(body string, version int) {
	t.Helper()
	return func(body string, version int) {
		t.Helper()
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		when := fixedNow.Add(time.Duration(version) * time.Second)
		if err := os.Chtimes(f, when, when); err != nil {
			t.Fatal(err)
		}
	}
}

// R-ZONE-3 (regression): a policy on a name that outbound forwards in the same server block is
// refused on a file reload as it is at startup; the reload keeps the last good data and logs why.
// The reload checked R-SEC-1 and the checks' names, not this: it served the policy.
func TestFileReloadRefusesForwardedNameRZone3(t *testing.T) {
	write, cfg, d := loadRecordSetsFile(t, "- {name: www.example.org., type: A, rrdatas: [10.0.0.1]}\n")
	rp := New(cfg, d)
	if err := startBesideOutbound(t, rp, "corp.example.org."); err != nil {
		t.Fatal(err)
	}
	defer rp.OnShutdown()

	logs := coretest.CaptureLog(t)
	write("- {name: db.corp.example.org., type: A, routingPolicy: {geo: {items: [{location: us-east1, rrdatas: [10.0.0.5]}]}}}\n", 2)
	if rp.reloadIfChanged(fixedNow) {
		t.Fatal("a policy on a name outbound forwards was loaded by a file reload")
	}
	if logs.Count("Reload of [example.org.] refused, serving the last good data", "db.corp.example.org./A: policies are not allowed on db.corp.example.org., which outbound forwards") != 1 {
		t.Fatalf("the refused reload is not logged with its reason:\n%s", logs)
	}
	if got := addrs(ask(t, rp, "www.example.org.", dns.TypeA, "10.1.1.1")); got != "10.0.0.1" {
		t.Fatalf("after the refused reload: %q, want the last good data", got)
	}
	// The same policy on a name outbound does not forward loads.
	write("- {name: db.example.org., type: A, routingPolicy: {geo: {items: [{location: us-east1, rrdatas: [10.0.0.5]}]}}}\n", 3)
	if !rp.reloadIfChanged(fixedNow) {
		t.Fatal("a policy on a name outbound does not forward was refused")
	}
	if got := addrs(ask(t, rp, "db.example.org.", dns.TypeA, "10.1.1.1")); got != "10.0.0.5" {
		t.Fatalf("after the reload: %q", got)
	}
}

// TestFileReloadSeesWriteDuringLoad: R-ZONE-3 (every file reload). Regression: the files were
// stamped for the reload check when the handler was made, after they were read: a write between the
// read and the stamp was never loaded (until the file changed again). The stamp is taken before the
// read, so such a write is loaded by the next check.
func TestFileReloadSeesWriteDuringLoad(t *testing.T) {
	write, cfg, d := loadRecordSetsFile(t, "- {name: www.example.org., type: A, rrdatas: [10.0.0.1]}\n")
	// Written after the read, before the handler is made (setup makes it right after load).
	write("- {name: www.example.org., type: A, rrdatas: [10.0.0.22]}\n", 2)
	rp := New(cfg, d)
	rp.board = health.NewBoard(countingClock())
	if err := rp.OnStartup(nil); err != nil {
		t.Fatal(err)
	}
	defer rp.OnShutdown()
	if !rp.reloadIfChanged(fixedNow) {
		t.Fatal("the file written while it was loaded is not reloaded")
	}
	if got := addrs(ask(t, rp, "www.example.org.", dns.TypeA, "10.1.1.1")); got != "10.0.0.22" {
		t.Fatalf("after the reload: %q, want the file's second version", got)
	}
	if rp.reloadIfChanged(fixedNow) {
		t.Fatal("unchanged file reloaded")
	}
}

// loadRecordSetsFile writes body as a record-set file (modification time fixedNow + 1 s), loads a
// routingpolicy block that reads it without a reload loop, and returns a function that rewrites
// the file as the given version (its modification time fixedNow + version seconds), the block's
// configuration and the data loaded.
func loadRecordSetsFile(t *testing.T, body string) (write func(body string, version int), cfg *Config, d *data) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "rs.yaml")
	write = versionWriter(t, f)
	write(body, 1)
	cfgs, err := parse(caddy.NewTestController("dns", `routingpolicy example.org {
		reload 0
		recordsets `+f+`
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if d, err = cfgs[0].load(fixedNow); err != nil {
		t.Fatal(err)
	}
	return write, cfgs[0], d
}

// TestFileReloadRefusesWhatLoadRefusesRZone3: R-ZONE-3 (every file reload): a reload of a
// record-set file or a zone file that breaks a load check (the item limit, for WRR, geo and a
// failover's backup; a CNAME beside other data; a name outside the zone; a CNAME loop; signed
// data) is refused, logged with its reason, and the last good data keeps answering. A record-set
// file past the item limit panicked in the query path before the limit was checked at every load.
func TestFileReloadRefusesWhatLoadRefusesRZone3(t *testing.T) {
	const items = maxItems + 1
	var coords, wrr, geo strings.Builder
	for i := range items {
		fmt.Fprintf(&coords, "coordinates r%d %d %d\n", i, i%90, i)
		fmt.Fprintf(&wrr, "{weight: 1, rrdatas: [10.1.%d.%d]},", i/250, i%250+1)
		fmt.Fprintf(&geo, "{location: r%d, rrdatas: [10.2.%d.%d]},", i, i/250, i%250+1)
	}
	const zoneHead = "$ORIGIN example.org.\n$TTL 60\n@ SOA ns1 h 1 2 3 4 5\n@ NS ns1\nns1 A 192.0.2.1\n"
	for _, tc := range []struct {
		name, directive, good, bad string
		reason                     []string
	}{
		{"wrr past the item limit", "recordsets", "- {name: www.example.org., type: A, rrdatas: [10.0.0.1]}\n",
			"- {name: www.example.org., type: A, routingPolicy: {wrr: {items: [" + wrr.String() + "]}}}\n",
			[]string{"www.example.org./A (", "129 items, at most 128 allowed"}},
		{"geo past the item limit", "recordsets", "- {name: www.example.org., type: A, rrdatas: [10.0.0.1]}\n",
			"- {name: www.example.org., type: A, routingPolicy: {geo: {items: [" + geo.String() + "]}}}\n",
			[]string{"www.example.org./A (", "129 items, at most 128 allowed"}},
		{"failover backup past the item limit", "recordsets", "- {name: www.example.org., type: A, rrdatas: [10.0.0.1]}\n",
			"- {name: www.example.org., type: A, routingPolicy: {primaryBackup: {primaryTargets: {externalEndpoints: [10.3.0.1]}, backupGeoTargets: {items: [" + geo.String() + "]}}}}\n",
			[]string{"www.example.org./A (", "129 items, at most 128 allowed"}},
		{"record set outside the zone", "recordsets", "- {name: www.example.org., type: A, rrdatas: [10.0.0.1]}\n",
			"- {name: www.example.org., type: A, rrdatas: [10.0.0.2]}\n- {name: www.example.net., type: A, rrdatas: [10.0.0.3]}\n",
			[]string{"outside the zones"}},
		{"signed record set", "recordsets", "- {name: www.example.org., type: A, rrdatas: [10.0.0.1]}\n",
			"- {name: www.example.org., type: A, rrdatas: [10.0.0.2], signatureRrdatas: ['A 13 3 60 20300101000000 20200101000000 12345 example.org. AAAA']}\n",
			[]string{"signatureRrdatas given (1): signed zone data is not supported"}},
		{"CNAME beside other data", "zonefile", zoneHead + "www A 10.0.0.1\n",
			zoneHead + "www A 10.0.0.2\nwww CNAME ns1\n", []string{"has a CNAME and other data"}},
		{"name outside the zone", "zonefile", zoneHead + "www A 10.0.0.1\n",
			zoneHead + "www A 10.0.0.2\nwww.example.net. A 10.0.0.3\n", []string{"outside the zones"}},
		{"CNAME loop", "zonefile", zoneHead + "www A 10.0.0.1\n",
			zoneHead + "www A 10.0.0.2\na CNAME b\nb CNAME a\n", []string{"CNAME loop"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "data")
			write := versionWriter(t, f)
			write(tc.good, 1)
			rp, _ := newTest(t, "routingpolicy example.org {\n reload 0\n "+tc.directive+" "+f+"\n"+coords.String()+"}")
			logs := coretest.CaptureLog(t)
			write(tc.bad, 2)
			if rp.reloadIfChanged(fixedNow) {
				t.Fatal("the broken file was loaded")
			}
			if logs.Count(append([]string{"Reload of [example.org.] failed, serving the last good data"}, tc.reason...)...) != 1 {
				t.Fatalf("the refused reload is not logged with %q:\n%s", tc.reason, logs)
			}
			if got := addrs(ask(t, rp, "www.example.org.", dns.TypeA, "10.1.1.1")); got != "10.0.0.1" {
				t.Fatalf("after the refused reload: %q, want the last good data (10.0.0.1)", got)
			}
			// The file loads again once it is mended: the checks refused the data, not the file.
			mended := "- {name: www.example.org., type: A, rrdatas: [10.0.0.2]}\n"
			if tc.directive == "zonefile" {
				mended = zoneHead + "www A 10.0.0.2\n"
			}
			write(mended, 3)
			if !rp.reloadIfChanged(fixedNow) {
				t.Fatal("the mended file was not loaded")
			}
			if got := addrs(ask(t, rp, "www.example.org.", dns.TypeA, "10.1.1.1")); got != "10.0.0.2" {
				t.Fatalf("after the mended reload: %q, want 10.0.0.2", got)
			}
		})
	}
}
