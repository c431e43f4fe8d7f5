package pschealth

import (
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	"go.uber.org/goleak"
)

// No goroutine outlives OnShutdown, across reload-like overlaps (start new, stop old) and with
// changes in flight.
func TestNoGoroutineLeak(t *testing.T) {
	defer coretest.NoLeak(t, goleak.IgnoreCurrent())
	coretest.CaptureLog(t)
	b := health.NewBoard(time.Now)
	bs := newBackends(t, b)

	// setup starts nothing: only OnStartup does.
	idle := goleak.IgnoreCurrent()
	c := caddy.NewTestController("dns", strings.Replace(twoRegions, "%s", "", 1))
	for _, n := range testChecks.Checks() {
		health.DemandOf(c).DefineCheck(n)
	}
	if err := setup(c); err != nil {
		t.Fatal(err)
	}
	if err := goleak.Find(idle); err != nil {
		t.Fatalf("setup started a goroutine: %v", err)
	}

	cur := New(config(t, ""), b)
	if err := cur.OnStartup(); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		next := New(config(t, ""), b)
		if err := next.OnStartup(); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			bs.all(health.Unhealthy)
		} else {
			bs.all(health.Healthy)
		}
		if err := cur.OnShutdown(); err != nil {
			t.Fatal(err)
		}
		cur = next
	}
	if err := cur.OnShutdown(); err != nil {
		t.Fatal(err)
	}
}
