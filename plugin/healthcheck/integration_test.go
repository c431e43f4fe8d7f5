package healthcheck

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

func vipOnBoard(vip string) (health.State, bool) {
	st, checked := coretest.OnBoard(health.Default, health.Key{Addr: netip.MustParseAddr(vip)})
	return st.State, checked
}

func lbCorefile(check, lbs string) string {
	return fmt.Sprintf(`example.org:0 {
	bind 127.0.0.1
	healthcheck {
		check tcp1 {
			interval 1s
			timeout 500ms
			healthy_threshold 1
			unhealthy_threshold 1
			%s
		}
		%s
		log
	}
	whoami
}
`, check, lbs)
}

// HC-4 through a real server: a load balancer's VIP is published on the process board and is
// healthy while at least threshold percent of its backends are; a group with no backend is
// healthy. Queries pass through healthcheck.
func TestLoadbalancerHC4(t *testing.T) {
	leakCheck(t)
	b1, b2 := listen(t, "127.0.5.1:0"), listen(t, "127.0.5.2:0")
	s := coretest.Start(t, lbCorefile("", fmt.Sprintf(`
		loadbalancer 10.99.0.1 {
			backends %s %s
			check tcp1
			threshold 60
		}
		loadbalancer 10.99.0.2`, b1.addr(), b2.addr())))

	waitFor(t, "VIP healthy", func() bool { st, _ := vipOnBoard("10.99.0.1"); return st == health.Healthy })
	if st, checked := vipOnBoard("10.99.0.2"); st != health.Healthy || !checked {
		t.Fatalf("empty group: %v checked %v, want healthy and published", st, checked)
	}
	if _, checked := vipOnBoard("10.99.0.1"); !checked {
		t.Fatal("VIP not published")
	}
	r, err := s.Query("example.org", dns.TypeA)
	if err != nil || r.Rcode != dns.RcodeSuccess {
		t.Fatalf("query through healthcheck: %v %v", r, err)
	}
	b2.close() // 1/2 = 50 % < 60 %
	waitFor(t, "VIP unhealthy", func() bool { st, _ := vipOnBoard("10.99.0.1"); return st == health.Unhealthy })
	if st, _ := coretest.OnBoard(health.Default, health.Key{Addr: netip.MustParseAddr("10.99.0.1")}); !strings.Contains(st.Reason, "1/2 backends healthy, threshold 60%") {
		t.Fatalf("reason %q", st.Reason)
	}
	listen(t, b2.addr().String())
	waitFor(t, "VIP healthy again", func() bool { st, _ := vipOnBoard("10.99.0.1"); return st == health.Healthy })
	s.Stop()
	// H-6: nothing of the configuration is left on the board, VIPs and backends alike.
	for _, k := range []health.Key{
		{Addr: netip.MustParseAddr("10.99.0.1")}, {Addr: netip.MustParseAddr("10.99.0.2")},
		{Check: "tcp1", Addr: b1.addr().Addr(), Port: b1.addr().Port()}, {Check: "tcp1", Addr: b2.addr().Addr(), Port: b2.addr().Port()},
	} {
		if coretest.Held(health.Default, k) {
			t.Errorf("%v still held on the board after shutdown", k)
		}
	}
	if n := probes(defaultRegistry); n != 0 {
		t.Fatalf("%d probes after shutdown", n)
	}
}

// H-3 and H-4 through real caddy reloads: the same (check, target) wanted by several blocks is
// probed once; a reload keeps the verdicts of the remaining targets (no change at all on the
// board) and stops the removed ones at once; goroutines do not grow.
func TestReloadH3H4(t *testing.T) {
	leakCheck(t)
	b1, b2 := listen(t, "127.0.5.3:0"), listen(t, "127.0.5.4:0")
	second := func(backends string) string {
		return fmt.Sprintf(`
example.net:0 {
	bind 127.0.0.1
	healthcheck {
		loadbalancer 10.99.1.2 {
			backends %s
			check tcp1
		}
	}
	whoami
}
`, backends)
	}
	both := fmt.Sprintf("%s %s", b1.addr(), b2.addr())
	cf1 := lbCorefile("", fmt.Sprintf("loadbalancer 10.99.1.1 {\nbackends %s\ncheck tcp1\n}", both)) + second(both)
	s := coretest.Start(t, cf1)
	waitFor(t, "VIPs healthy", func() bool {
		a, _ := vipOnBoard("10.99.1.1")
		b, _ := vipOnBoard("10.99.1.2")
		return a == health.Healthy && b == health.Healthy
	})
	// H-3: two blocks want both backends: two probes, not four.
	if n := probes(defaultRegistry); n != 2 {
		t.Fatalf("%d probes, want 2 (one per check and target)", n)
	}
	k1 := health.Key{Check: "tcp1", Addr: b1.addr().Addr(), Port: b1.addr().Port()}
	k2 := health.Key{Check: "tcp1", Addr: b2.addr().Addr(), Port: b2.addr().Port()}
	// A VIP is decided before all its backends are (HC-4): wait for theirs too.
	waitFor(t, "backends healthy", func() bool {
		s1, _ := coretest.OnBoard(health.Default, k1)
		s2, _ := coretest.OnBoard(health.Default, k2)
		return s1.State == health.Healthy && s2.State == health.Healthy
	})
	st1, _ := coretest.OnBoard(health.Default, k1)
	since := st1.Since

	var mu sync.Mutex
	var changes []health.Change
	cancel := health.Default.Subscribe(func(c health.Change) {
		mu.Lock()
		changes = append(changes, c)
		mu.Unlock()
	})
	defer cancel()

	g0 := 0
	for i := range 3 {
		// Reload with the same Corefile twice, then drop backend 2.
		cf := cf1
		if i == 2 {
			cf = lbCorefile("", fmt.Sprintf("loadbalancer 10.99.1.1 {\nbackends %s\ncheck tcp1\n}", b1.addr())) + second(b1.addr().String())
		}
		if err := s.Reload(cf); err != nil {
			t.Fatal(err)
		}
		// Goroutines do not grow with reloads of the same Corefile.
		// The probe workers are a pool that only grows on demand: leave them out.
		switch i {
		case 0:
			g0 = goroutines()
		case 1:
			waitFor(t, "goroutines back to their number after one reload", func() bool { return goroutines() <= g0 })
		}
	}
	mu.Lock()
	if len(changes) != 0 {
		t.Errorf("a reload changed the board: %+v", changes)
	}
	mu.Unlock()
	if st, _ := coretest.OnBoard(health.Default, k1); st.State != health.Healthy || !st.Since.Equal(since) {
		t.Fatalf("backend 1 after reloads: %+v, want healthy since %v", st, since)
	}
	// H-4: the removed backend is gone from the registry and the board at once.
	if n := probes(defaultRegistry); n != 1 {
		t.Fatalf("%d probes after removing a backend, want 1", n)
	}
	if coretest.Held(health.Default, k2) {
		t.Fatal("removed backend still held on the board")
	}
	s.Stop()
	if n := probes(defaultRegistry); n != 0 {
		t.Fatalf("%d probes after shutdown", n)
	}
	for _, k := range []health.Key{k1, {Addr: netip.MustParseAddr("10.99.1.1")}, {Addr: netip.MustParseAddr("10.99.1.2")}} {
		if coretest.Held(health.Default, k) {
			t.Errorf("%v still held on the board after shutdown", k)
		}
	}
}

// Configuration errors across server blocks: a check defined twice, and a load balancer naming
// a check that no block defines. A check of a later block is fine.
func TestCrossBlockErrors(t *testing.T) {
	leakCheck(t)
	block := func(zone, body string) string {
		return fmt.Sprintf("%s:0 {\nbind 127.0.0.1\nhealthcheck {\n%s\n}\nwhoami\n}\n", zone, body)
	}
	_, err := coretest.New(block("example.org", "check web") + block("example.net", "check web"))
	if err == nil || !strings.Contains(err.Error(), `check "web" defined twice`) {
		t.Fatalf("duplicate check across blocks: %v", err)
	}
	_, err = coretest.New(block("example.org", "check web\nloadbalancer 10.99.2.1 {\nbackends 127.0.5.9\ncheck nope\n}"))
	if err == nil || !strings.Contains(err.Error(), `loadbalancer 10.99.2.1: check "nope" is not defined in any healthcheck block (defined: web)`) {
		t.Fatalf("unknown check: %v", err)
	}
	// The bad load balancer is in the second block: the first block must not start either.
	_, err = coretest.New(block("example.org", "check web\nloadbalancer 10.99.2.5 {\nbackends 127.0.5.9\ncheck web\n}") +
		block("example.net", "loadbalancer 10.99.2.6 {\nbackends 127.0.5.9\ncheck nope\n}"))
	if err == nil || !strings.Contains(err.Error(), `check "nope" is not defined`) {
		t.Fatalf("unknown check in the second block: %v", err)
	}
	if n := probes(defaultRegistry); n != 0 {
		t.Fatalf("a refused Corefile left %d probes", n)
	}
	if _, checked := vipOnBoard("10.99.2.5"); checked {
		t.Fatal("a refused Corefile left a VIP on the board")
	}
	_, err = coretest.New(block("example.org", "loadbalancer 10.99.2.1\nloadbalancer 10.99.2.2") + block("example.net", "loadbalancer 10.99.2.1"))
	if err == nil || !strings.Contains(err.Error(), "loadbalancer 10.99.2.1 defined twice") {
		t.Fatalf("VIP in two blocks: %v", err)
	}
	// Forward reference: block 1's load balancer uses block 2's check.
	rec := listen(t, "127.0.5.10:0")
	s := coretest.Start(t, block("example.org", fmt.Sprintf("loadbalancer 10.99.2.3 {\nbackends %s\ncheck later\n}", rec.addr()))+
		block("example.net", "check later {\ninterval 1s\ntimeout 500ms\n}"))
	waitFor(t, "VIP of a later block's check", func() bool { st, _ := vipOnBoard("10.99.2.3"); return st == health.Healthy })
	s.Stop()
}

// A reload that fails after healthcheck started (a listener that cannot bind) must not leave
// the new instance's probes running: caddy discards that instance without its OnShutdown.
func TestFailedReloadReleases(t *testing.T) {
	leakCheck(t)
	b1, b2 := listen(t, "127.0.5.11:0"), listen(t, "127.0.5.12:0")
	s := coretest.Start(t, lbCorefile("", fmt.Sprintf("loadbalancer 10.99.3.1 {\nbackends %s\ncheck tcp1\n}", b1.addr())))
	waitFor(t, "VIP healthy", func() bool { st, _ := vipOnBoard("10.99.3.1"); return st == health.Healthy })
	// b2's port is taken by our listener: the new server block cannot bind it.
	busy := b2.addr()
	cf := lbCorefile("", fmt.Sprintf("loadbalancer 10.99.3.1 {\nbackends %s %s\ncheck tcp1\n}", b1.addr(), b2.addr())) +
		fmt.Sprintf("example.net:%d {\nbind %s\nwhoami\n}\n", busy.Port(), busy.Addr())
	if err := s.Reload(cf); err == nil {
		t.Fatal("reload onto a busy port succeeded")
	}
	if n := probes(defaultRegistry); n != 1 {
		t.Fatalf("%d probes after a failed reload, want 1 (the old instance's)", n)
	}
	if coretest.Held(health.Default, health.Key{Check: "tcp1", Addr: b2.addr().Addr(), Port: b2.addr().Port()}) {
		t.Fatal("the failed instance's target is still held on the board")
	}
	if st, checked := vipOnBoard("10.99.3.1"); st != health.Healthy || !checked {
		t.Fatalf("old instance's VIP: %v %v", st, checked)
	}
	s.Stop()
	if n := probes(defaultRegistry); n != 0 {
		t.Fatalf("%d probes after shutdown", n)
	}
}

// H-2 through the ready plugin: a block whose target has no verdict yet (here never: its only
// prober cannot bind its source address, HC-3) keeps /ready at 503 naming healthcheck;
// ready_wait off does not wait.
func TestReadyPluginH2(t *testing.T) {
	leakCheck(t)
	ln, err := net.Listen("tcp", "127.0.5.20:0")
	if err != nil {
		t.Fatal(err)
	}
	readyAddr := ln.Addr().String()
	ln.Close()
	rec := listen(t, "127.0.5.21:0")
	cf := func(wait string) string {
		return fmt.Sprintf(`example.org:0 {
	bind 127.0.0.1
	ready %s
	healthcheck {
		check blind {
			interval 1s
			timeout 500ms
			prober us-east1 192.0.2.1
		}
		loadbalancer 10.99.4.1 {
			backends %s
			check blind
		}
		ready_wait %s
	}
	whoami
}
`, readyAddr, rec.addr(), wait)
	}
	s := coretest.Start(t, cf("on"))
	client := &http.Client{Timeout: 2 * time.Second}
	get := func() (int, string) {
		resp, err := client.Get("http://" + readyAddr + "/ready")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Wait for a probe round to have run and given no result, then /ready must still say no.
	waitFor(t, "a round without result", func() bool {
		return testutilCount(t, "blind", "us-east1", "error") > 0
	})
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "healthcheck") {
		t.Fatalf("/ready: %d %q, want 503 naming healthcheck", code, body)
	}
	if err := s.Reload(cf("off")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ready with ready_wait off", func() bool { code, _ := get(); return code == http.StatusOK })
	s.Stop()
	client.CloseIdleConnections()
}

// testutilCount reads coredns_healthcheck_probes_total for check, region and result.
func testutilCount(t *testing.T, check, region, result string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "coredns_healthcheck_probes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["check"] == check && l["region"] == region && l["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
