package test

import (
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// fileCorefile is a server with one HTTP check probing from source, a record-set file reloaded
// every second, and the prometheus plugin at metrics; extra goes after the server block.
func fileCorefile(check string, port uint16, source, file, metrics, extra string) string {
	return fmt.Sprintf(`lifecycle.test:0 {
	bind 127.0.0.1
	prometheus %s
	healthcheck {
		check %s {
			protocol http
			port %d
			path /%s
			interval 1s
			timeout 500ms
			prober us-east1 %s
		}
	}
	routingpolicy {
		recordsets %s
		reload 1s
	}
}
%s`, metrics, check, port, check, source, file, extra)
}

// writeRecordSets writes a record-set file with one WRR set "www" probed by check, an item per
// address, dated version seconds after a fixed time so every version is a change.
func writeRecordSets(t *testing.T, file, check string, version int, addrs ...string) {
	t.Helper()
	items := make([]string, 0, len(addrs))
	for _, a := range addrs {
		items = append(items, fmt.Sprintf(`{"weight": 1, "rrdatas": [%q]}`, a))
	}
	body := fmt.Sprintf(`[{"name": "www.lifecycle.test.", "type": "A", "ttl": 30, "routingPolicy": {"healthCheck": %q, "wrr": {"items": [%s]}}}]`,
		check, strings.Join(items, ", "))
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	when := time.Unix(1_700_000_000+int64(version), 0)
	if err := os.Chtimes(file, when, when); err != nil {
		t.Fatal(err)
	}
}

// waitFileReload waits until the zone's reloads_total for result passes from.
func waitFileReload(t *testing.T, url, zone, result string, from float64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for counterValue(t, url, "coredns_routingpolicy_reloads_total", map[string]string{"zone": zone, "result": result}) <= from {
		if time.Now().After(deadline) {
			t.Fatalf("no %s file reload of %s within 15s", result, zone)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// H-6 (issue 11, item 1): an address that a record-set file reload removes stops being probed at
// once, and its target_state series goes; the addresses still named keep being probed.
func TestFileReloadStopsItsProbesH6(t *testing.T) {
	const check, src = "h6-file", "127.0.79.10"
	pt := startProbeTargets(t, []string{"127.0.79.1", "127.0.79.2"})
	file := filepath.Join(t.TempDir(), "rs.json")
	writeRecordSets(t, file, check, 1, "127.0.79.1", "127.0.79.2")
	metrics := "127.0.0.1:" + coretest.FreePort(t)
	url := "http://" + metrics + "/metrics"
	s := coretest.Start(t, fileCorefile(check, pt.port, src, file, metrics, ""))
	a, b := probeKey{check, "127.0.79.1", src}, probeKey{check, "127.0.79.2", src}
	start := time.Now()
	pt.waitProbe(t, a, start, 10*time.Second)
	pt.waitProbe(t, b, start, 10*time.Second)

	before := counterValue(t, url, "coredns_routingpolicy_reloads_total", map[string]string{"zone": "lifecycle.test.", "result": "success"})
	writeRecordSets(t, file, check, 2, "127.0.79.1")
	waitFileReload(t, url, "lifecycle.test.", "success", before)
	removed := time.Now()
	nb, _ := pt.count(b)
	if got := seriesOf(t, url, "coredns_healthcheck_target_state", "target"); slices.Contains(got, addrPort("127.0.79.2", pt.port)) {
		t.Errorf("the removed address is still exported: %v", got)
	}
	// Two rounds of the address still named: two intervals have passed.
	pt.waitProbe(t, a, removed, 10*time.Second)
	_, last := pt.count(a)
	pt.waitProbe(t, a, last, 10*time.Second)
	// One probe may have been in flight when the reload released it.
	if n, _ := pt.count(b); n > nb+1 {
		t.Errorf("the removed address got %d probes after the file reload removed it", n-nb)
	}
	s.Stop()
}

// H-6 (issue 11, item 2): after a Corefile reload that fails (a listener that cannot bind), the
// surviving instance's file reloads work as before: an address a file reload adds is probed.
func TestFailedReloadKeepsFileReloadsH6(t *testing.T) {
	const check, src = "h6-failed", "127.0.79.11"
	pt := startProbeTargets(t, []string{"127.0.79.3", "127.0.79.4"})
	file := filepath.Join(t.TempDir(), "rs.json")
	writeRecordSets(t, file, check, 1, "127.0.79.3")
	metrics := "127.0.0.1:" + coretest.FreePort(t)
	url := "http://" + metrics + "/metrics"
	cf := fileCorefile(check, pt.port, src, file, metrics, "")
	s := coretest.Start(t, cf)
	pt.waitProbe(t, probeKey{check, "127.0.79.3", src}, time.Now(), 10*time.Second)

	busy, port := busyListener(t)
	defer busy()
	if err := s.Reload(fileCorefile(check, pt.port, src, file, metrics, "busy.test:"+port+" {\n\tbind 127.0.0.1\n\twhoami\n}\n")); err == nil {
		t.Fatal("a reload onto a busy port succeeded")
	}

	before := counterValue(t, url, "coredns_routingpolicy_reloads_total", map[string]string{"zone": "lifecycle.test.", "result": "success"})
	writeRecordSets(t, file, check, 2, "127.0.79.3", "127.0.79.4")
	waitFileReload(t, url, "lifecycle.test.", "success", before)
	pt.waitProbe(t, probeKey{check, "127.0.79.4", src}, time.Now(), 10*time.Second)
	if got := seriesOf(t, url, "coredns_healthcheck_target_state", "target"); !slices.Contains(got, addrPort("127.0.79.4", pt.port)) {
		t.Errorf("the added address is not exported: %v", got)
	}
	s.Stop()
}

// H-6 (issue 11, item 6): the series of a check, a target and a VIP that a Corefile reload
// removes are deleted.
func TestReloadDeletesHealthcheckSeriesH6(t *testing.T) {
	pt := startProbeTargets(t, []string{"127.0.79.5"})
	metrics := "127.0.0.1:" + coretest.FreePort(t)
	url := "http://" + metrics + "/metrics"
	cf := func(extra string) string {
		return fmt.Sprintf(`lifecycle.test:0 {
	bind 127.0.0.1
	prometheus %s
	healthcheck {
		check h6-keep {
			protocol http
			port %d
			path /h6-keep
			interval 1s
			timeout 500ms
		}
		%s
	}
	whoami
}
`, metrics, pt.port, extra)
	}
	s := coretest.Start(t, cf(fmt.Sprintf(`check h6-gone {
			protocol http
			port %d
			path /h6-gone
			interval 1s
			timeout 500ms
		}
		loadbalancer 10.79.0.1 {
			backends 127.0.79.5
			check h6-gone
		}`, pt.port)))
	if got := seriesOf(t, url, "coredns_healthcheck_probes_total", "check"); !slices.Contains(got, "h6-gone") {
		t.Fatalf("probes_total checks %v", got)
	}
	if err := s.Reload(cf("")); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"coredns_healthcheck_probes_total", "coredns_healthcheck_probe_duration_seconds_bucket", "coredns_healthcheck_state_transitions_total", "coredns_healthcheck_target_state"} {
		if got := seriesOf(t, url, m, "check"); slices.Contains(got, "h6-gone") {
			t.Errorf("%s still has the removed check: %v", m, got)
		}
	}
	if got := seriesOf(t, url, "coredns_healthcheck_target_state", "target"); slices.Contains(got, "10.79.0.1") || slices.Contains(got, addrPort("127.0.79.5", pt.port)) {
		t.Errorf("target_state still has the removed VIP or backend: %v", got)
	}
	s.Stop()
}

// H-6 (issue 11, item 6): a check whose prober regions a reload changes loses the per-region
// series (probes_total, probe_duration_seconds) of the region the live configuration no longer
// names.
func TestReloadDeletesRemovedRegionSeriesH6(t *testing.T) {
	coretest.CaptureLog(t)
	pt := startProbeTargets(t, []string{"127.0.79.40"})
	cf := func(probers string) string {
		return fmt.Sprintf(`regions.test:0 {
	bind 127.0.0.1
	healthcheck {
		check h6-regions {
			protocol http
			port %d
			interval 1s
			timeout 500ms
%s		}
		loadbalancer 10.79.8.1 {
			backends 127.0.79.40
			check h6-regions
		}
	}
	whoami
}
`, pt.port, probers)
	}
	s := coretest.Start(t, cf("\t\t\tprober us-east1 127.0.79.41\n\t\t\tprober europe-west1 127.0.79.42\n"))
	defer s.Stop()
	pt.waitProbe(t, probeKey{"", "127.0.79.40", "127.0.79.42"}, time.Time{}, 10*time.Second)
	regions := func(m string) []string {
		var out []string
		for _, l := range coretest.Series(t, m) {
			if l["check"] == "h6-regions" {
				out = append(out, l["region"])
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	for _, m := range []string{"coredns_healthcheck_probes_total", "coredns_healthcheck_probe_duration_seconds"} {
		if got := regions(m); !slices.Equal(got, []string{"europe-west1", "us-east1"}) {
			t.Fatalf("%s: regions %v before the reload", m, got)
		}
	}
	if err := s.Reload(cf("\t\t\tprober us-east1 127.0.79.41\n")); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"coredns_healthcheck_probes_total", "coredns_healthcheck_probe_duration_seconds"} {
		if got := regions(m); !slices.Equal(got, []string{"us-east1"}) {
			t.Errorf("%s: regions %v after a reload that removed europe-west1", m, got)
		}
	}
}

// P-6 and H-2 (issue 11, item 5): a dry_run composite has no effect on consumers, readiness
// included, also through healthcheck, which probes its backends: a backend only a dry run names
// does not hold the ready plugin back. Here that backend's only prober cannot run (HC-3: an IPv6
// source for an IPv4 target gives no result), so it never has a verdict.
func TestDryRunDoesNotHoldReadyThroughHealthcheckP6(t *testing.T) {
	coretest.CaptureLog(t)
	ready := "127.0.0.1:" + coretest.FreePort(t)
	s := coretest.Start(t, fmt.Sprintf(`dryready.test:0 {
	bind 127.0.0.1
	ready %s
	healthcheck {
		check p6-dry {
			protocol tcp
			port 9
			interval 1s
			timeout 500ms
			prober us-east1 ::1
		}
	}
	pschealth {
		source p6-s {
			backends 127.0.0.1
			check p6-dry
		}
		composite p6-k {
			sources p6-s
			destination 10.79.9.9
		}
		dry_run
	}
	whoami
}
`, ready))
	defer s.Stop()
	url := "http://" + ready + "/ready"
	deadline := time.Now().Add(5 * time.Second)
	for {
		code := 0
		if resp, err := metricsClient.Get(url); err == nil {
			resp.Body.Close()
			code = resp.StatusCode
		}
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/ready %d after 5 s: only a dry_run composite names the undecided backend", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// H-4 and H-6: after every path (start, file reload, a reload failing on a busy port, reload,
// shutdown) no board reference is left: what the configurations named is gone from the board.
func TestBoardEmptyAfterEveryPathH4(t *testing.T) {
	coretest.CaptureLog(t)
	pt := startProbeTargets(t, []string{"127.0.79.60", "127.0.79.61", "127.0.79.62"})
	file := filepath.Join(t.TempDir(), "rs.json")
	writeRecordSets(t, file, "h4-board", 1, "127.0.79.60")
	metrics := "127.0.0.1:" + coretest.FreePort(t)
	url := "http://" + metrics + "/metrics"
	cf := func(extra, after string) string {
		return fmt.Sprintf(`lifecycle.test:0 {
	bind 127.0.0.1
	prometheus %s
	healthcheck {
		check h4-board {
			protocol http
			port %d
			interval 1s
			timeout 500ms
			prober us-east1 127.0.79.63
		}
		%s
	}
	pschealth {
		source h4-bs {
			backends 127.0.79.62
			check h4-board
		}
		composite h4-bk {
			sources h4-bs
			destination 10.79.6.2
		}
	}
	routingpolicy {
		recordsets %s
		reload 1s
		wrr plain A 30 "1=10.79.6.9"
	}
}
%s`, metrics, pt.port, extra, file, after)
	}
	lb := "loadbalancer 10.79.6.1 {\n\t\t\tbackends 127.0.79.61\n\t\t\tcheck h4-board\n\t\t}"
	s := coretest.Start(t, cf(lb, ""))
	before := counterValue(t, url, "coredns_routingpolicy_reloads_total", map[string]string{"zone": "lifecycle.test.", "result": "success"})
	writeRecordSets(t, file, "h4-board", 2, "127.0.79.60", "127.0.79.61")
	waitFileReload(t, url, "lifecycle.test.", "success", before)
	busy, port := busyListener(t)
	if err := s.Reload(cf(lb, "busy.test:"+port+" {\n\tbind 127.0.0.1\n\twhoami\n}\n")); err == nil {
		t.Fatal("a reload onto a busy port succeeded")
	}
	busy()
	if err := s.Reload(cf("", "")); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	for _, k := range []health.Key{
		{Check: "h4-board", Addr: netip.MustParseAddr("127.0.79.60")},
		{Check: "h4-board", Addr: netip.MustParseAddr("127.0.79.61")},
		{Check: "h4-board", Addr: netip.MustParseAddr("127.0.79.62")},
		{Addr: netip.MustParseAddr("10.79.6.1")},
		{Addr: netip.MustParseAddr("10.79.6.2")},
		{Addr: netip.MustParseAddr("10.79.6.9")},
	} {
		if coretest.Held(health.Default, k) {
			t.Errorf("%v is still held on the board after shutdown", k)
		}
	}
}

// H-3 and H-6 across server blocks: a check defined in the second block is wanted by record sets
// of both; a reload removes the first block, which stops the probes only it wanted, and then
// brings it back.
func TestBlocksShareChecksH6(t *testing.T) {
	coretest.CaptureLog(t)
	pt := startProbeTargets(t, []string{"127.0.79.70", "127.0.79.71"})
	metrics := "127.0.0.1:" + coretest.FreePort(t)
	url := "http://" + metrics + "/metrics"
	first := `a.test:0 {
	bind 127.0.0.1
	routingpolicy {
		wrr www A 30 "1=127.0.79.70;1=127.0.79.71" healthcheck h6-shared
	}
}
`
	second := fmt.Sprintf(`b.test:0 {
	bind 127.0.0.1
	prometheus %s
	healthcheck {
		check h6-shared {
			protocol http
			port %d
			path /h6-shared
			interval 1s
			timeout 500ms
			prober us-east1 127.0.79.72
		}
	}
	routingpolicy {
		wrr www A 30 "1=127.0.79.70" healthcheck h6-shared
	}
}
`, metrics, pt.port)
	s := coretest.Start(t, first+second)
	defer s.Stop()
	a, b := probeKey{"h6-shared", "127.0.79.70", "127.0.79.72"}, probeKey{"h6-shared", "127.0.79.71", "127.0.79.72"}
	pt.waitProbe(t, a, time.Time{}, 10*time.Second)
	pt.waitProbe(t, b, time.Time{}, 10*time.Second)
	targets := func() []string {
		var out []string
		for _, l := range scrape(t, url, "coredns_healthcheck_target_state") {
			if l["check"] == "h6-shared" {
				out = append(out, l["target"])
			}
		}
		slices.Sort(out)
		return out
	}
	if err := s.Reload(second); err != nil {
		t.Fatal(err)
	}
	if got := targets(); !slices.Equal(got, []string{addrPort("127.0.79.70", pt.port)}) {
		t.Fatalf("after the first block went: %v", got)
	}
	nb, _ := pt.count(b)
	removed := time.Now()
	pt.waitProbe(t, a, removed, 10*time.Second)
	_, last := pt.count(a)
	pt.waitProbe(t, a, last, 10*time.Second)
	if n, _ := pt.count(b); n > nb+1 {
		t.Errorf("the address only the removed block named got %d probes since", n-nb)
	}
	if err := s.Reload(first + second); err != nil {
		t.Fatal(err)
	}
	pt.waitProbe(t, b, time.Now(), 10*time.Second)
	if got := targets(); len(got) != 2 {
		t.Fatalf("after the first block came back: %v", got)
	}
}
