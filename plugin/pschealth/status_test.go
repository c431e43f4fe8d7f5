package pschealth

import (
	"strings"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/statusview"
)

// S-1, P-1, P-3, P-6: the status view of a dry run is marked, not published, and each source is
// counted against its policy with the arithmetic that decides it.
func TestStatusViewDryRun(t *testing.T) {
	b := health.NewBoard(time.Now)
	bs := newBackends(t, b)
	p := start(t, config(t, "dry_run"), b)
	bs.all(health.Healthy)
	bs.set(health.Unhealthy, "web/127.0.1.1", "web/127.0.1.2")
	var c statusview.Composite
	eventually(t, "the view of svc-a unhealthy", func() bool {
		var v statusview.View
		p.Fill(&v)
		for _, x := range v.Composites {
			if x.Name == "svc-a" {
				c = x
			}
		}
		return c.State == "unhealthy"
	})
	if !c.DryRun || c.Published || c.Destination != "127.0.9.1" || len(c.Sources) != 2 {
		t.Fatalf("composite: %+v", c)
	}
	s := c.Sources[0]
	if s.Healthy != 1 || s.Total != 3 || s.State != "unhealthy" || !strings.HasPrefix(s.Arithmetic, "1/3 = 33 % < 60 % and 1 >= 1: unhealthy") {
		t.Fatalf("source: %+v", s)
	}
	if err := p.OnShutdown(); err != nil {
		t.Fatal(err)
	}
	var v statusview.View
	p.Fill(&v)
	if len(v.Composites) != 0 {
		t.Fatalf("a stopped block shows %+v", v.Composites)
	}
}
