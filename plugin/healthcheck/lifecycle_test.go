package healthcheck

import (
	"net/netip"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// H-6 and HC-4, the newest-writer rule when the newest instance is abandoned: a reload whose new
// instance derived a VIP from its own backends fails, and the surviving instance writes the VIP
// again with what it computes, Unknown included: the VIP does not keep the state a Corefile that
// never served computed.
func TestAbandonedNewestGivesTheVIPBackH6(t *testing.T) {
	leakCheck(t)
	vip := health.Key{Addr: netip.MustParseAddr("10.0.0.100")}
	a, r, _, b := testInstance(t, `healthcheck {
		check web {
			interval 10s
		}
		loadbalancer 10.0.0.100 {
			backends 10.0.0.1
			check web
		}
	}`)
	s := newScript()
	r.probe = s.probe
	if err := a.OnStartup(); err != nil {
		t.Fatal(err)
	}
	defer a.OnShutdown()
	if st, _ := coretest.OnBoard(b, vip); st.State != health.Unknown {
		t.Fatalf("survivor's VIP %v before the reload, want unknown (no backend verdict yet)", st.State)
	}

	// The failed reload's instance: the same VIP over another backend that already has a verdict
	// (another consumer holds it and it was probed unhealthy).
	other := health.Key{Check: "web", Addr: netip.MustParseAddr("10.0.0.2"), Port: 80}
	held := b.Acquire(other)
	defer b.Release(held)
	b.Set(held, health.Unhealthy, "probed elsewhere")
	c := caddy.NewTestController("dns", `healthcheck {
		check web {
			interval 10s
		}
		loadbalancer 10.0.0.100 {
			backends 10.0.0.2:80
			check web
		}
	}`)
	cfg, err := parse(c)
	if err != nil {
		t.Fatal(err)
	}
	d := health.DemandOf(c)
	d.DefineCheck("web")
	next := &HealthCheck{cfg: cfg, board: b, reg: r, demand: d}
	if err := next.OnStartup(); err != nil {
		t.Fatal(err)
	}
	if st, _ := coretest.OnBoard(b, vip); st.State != health.Unhealthy {
		t.Fatalf("new instance's VIP %v, want unhealthy", st.State)
	}
	next.OnShutdown() // the reload fails: lifecycle abandons the new instance

	// The survivor writes again (Writers.Leave asks it); its backend still has no verdict.
	waitFor(t, "the survivor's VIP back to what the survivor computes (unknown, served)", func() bool {
		st, _ := coretest.OnBoard(b, vip)
		return st.State == health.Unknown
	})
}
