package healthcheck

import (
	"net/netip"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"
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
	for _, k := range want {
		t.Cleanup(d.Want(k)) // a consumer's want, made before the block starts
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
	if _, checked := coretest.OnBoard(b, ext); !checked {
		t.Fatal("a consumer's wanted target is not published")
	}
	clk.Advance(5 * time.Second) // jitter is half the interval here
	waitRounds(t, r, 3)
	waitFor(t, "ready", h.Ready)
	if st, _ := coretest.OnBoard(b, health.Key{Addr: netip.MustParseAddr("10.0.0.100")}); st.State != health.Healthy {
		t.Fatalf("VIP %v", st.State)
	}

	off, _, _, _ := testInstance(t, "healthcheck {\ncheck web\nready_wait off\n}", ext)
	if !off.Ready() {
		t.Fatal("ready_wait off: not ready")
	}
}

// HC-4: the VIP derives from its backends: healthy at the threshold, a group with no backend
// healthy; it is decided as soon as the backends without a verdict cannot change the outcome,
// and unknown only while they can.
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
	if st, _ := lb.derive(ts); st != health.Unknown {
		t.Fatalf("no backend decided: %v, want unknown", st)
	}
	b.Set(ts[0], health.Healthy, "")
	if st, reason := lb.derive(ts); st != health.Healthy || reason != "1/5 backends healthy, threshold 20%, 4 without a verdict" {
		t.Fatalf("1 of 5 healthy, 4 undecided, at 20%%: %v %q, want healthy (settled whatever the others say)", st, reason)
	}
	lb.Threshold = 60
	b.Set(ts[1], health.Unhealthy, "")
	b.Set(ts[2], health.Unhealthy, "")
	if st, _ := lb.derive(ts); st != health.Unknown {
		t.Fatalf("1 healthy, 2 unhealthy, 2 undecided at 60%%: %v, want unknown (3/5 still possible)", st)
	}
	b.Set(ts[3], health.Unhealthy, "")
	if st, _ := lb.derive(ts); st != health.Unhealthy {
		t.Fatalf("1 healthy, 3 unhealthy, 1 undecided at 60%%: %v, want unhealthy (at most 2/5)", st)
	}
	b.Set(ts[4], health.Unhealthy, "")
	lb.Threshold = 20
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
