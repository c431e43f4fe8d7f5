package healthcheck

import (
	"net/netip"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// testInstance sets up a block as setup does, on a board and registry of its own.
func testInstance(t *testing.T, corefile string, want ...health.Key) (*HealthCheck, *Registry, *fakeClock, *health.Board) {
	t.Helper()
	c := caddy.NewTestController("dns", corefile)
	cfg, err := parse(c)
	if err != nil {
		t.Fatal(err)
	}
	d := health.DemandOf(c)
	for _, ch := range cfg.checks {
		d.DefineCheck(ch.Name)
	}
	for _, lb := range cfg.lbs {
		for _, k := range lb.keys() {
			d.Want(k)
		}
	}
	for _, k := range want {
		d.Want(k)
	}
	clk := newFakeClock()
	b := health.NewBoard(clk.Now)
	r := NewRegistry(b, clk)
	r.jitter = func(d time.Duration) time.Duration { return d / 2 }
	r.early = 0
	return &HealthCheck{cfg: cfg, board: b, reg: r, demand: d}, r, clk, b
}

// H-2: ready waits for the first verdict of every target and VIP; ready_wait off does not.
func TestReadyH2(t *testing.T) {
	leakCheck(t)
	const cf = `healthcheck {
		check web {
			interval 10s
		}
		loadbalancer 10.0.0.100 {
			backends 10.0.0.1 10.0.0.2
			check web
		}
		loadbalancer 10.0.0.101
	}`
	ext := health.Key{Check: "web", Addr: netip.MustParseAddr("10.0.0.3")} // a routingpolicy address
	h, r, clk, b := testInstance(t, cf, ext)
	s := newScript()
	r.probe = s.probe
	if h.Ready() {
		t.Fatal("ready before startup")
	}
	if err := h.OnStartup(); err != nil {
		t.Fatal(err)
	}
	defer h.OnShutdown()
	if h.Ready() {
		t.Fatal("ready before any verdict")
	}
	if tg := b.Lookup(ext); tg == nil || !tg.Checked() {
		t.Fatal("a consumer's wanted target is not published")
	}
	clk.Advance(5 * time.Second) // jitter is half the interval here
	waitRounds(t, r, 3)
	waitFor(t, "ready", h.Ready)
	if st := b.Lookup(health.Key{Addr: netip.MustParseAddr("10.0.0.100")}).State(); st != health.Healthy {
		t.Fatalf("VIP %v", st)
	}

	off, _, _, _ := testInstance(t, "healthcheck {\ncheck web\nready_wait off\n}", ext)
	if !off.Ready() {
		t.Fatal("ready_wait off: not ready")
	}
}

// HC-4: the VIP derives from its backends: unknown until each has a verdict, healthy at the
// threshold, a group with no backend healthy.
func TestDeriveHC4(t *testing.T) {
	b := health.NewBoard(time.Now)
	ts := make([]*health.Target, 0, 5)
	for i := range 5 {
		ts = append(ts, b.Acquire(health.Key{Check: "c", Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})}))
	}
	lb := &Loadbalancer{Threshold: 20}
	if st, _ := lb.derive(nil); st != health.Healthy {
		t.Fatalf("no backends: %v, want healthy", st)
	}
	b.Set(ts[0], health.Healthy, "")
	if st, _ := lb.derive(ts); st != health.Unknown {
		t.Fatalf("undecided backends: %v, want unknown", st)
	}
	for _, tg := range ts[1:] {
		b.Set(tg, health.Unhealthy, "")
	}
	if st, _ := lb.derive(ts); st != health.Healthy {
		t.Fatalf("1/5 at 20%%: %v, want healthy", st)
	}
	lb.Threshold = 21
	if st, _ := lb.derive(ts); st != health.Unhealthy {
		t.Fatalf("1/5 at 21%%: %v, want unhealthy", st)
	}
	lb.Threshold = 0
	b.Set(ts[0], health.Unhealthy, "")
	if st, _ := lb.derive(ts); st != health.Healthy {
		t.Fatalf("0/5 at 0%%: %v, want healthy", st)
	}
}
