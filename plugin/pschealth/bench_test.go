package pschealth

import (
	"fmt"
	"io"
	golog "log"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// BenchmarkEvaluate is one recomputation of 10 composites of 2 sources of 500 backends each
// (10 000 backends), the work a burst of backend changes costs (bursts are coalesced).
func BenchmarkEvaluate(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("pschealth {\n")
	for c := range 10 {
		for s := range 2 {
			fmt.Fprintf(&sb, "source s%d-%d {\ncheck web\nbackends", c, s)
			for i := range 500 {
				fmt.Fprintf(&sb, " 10.%d.%d.%d", c, s*2+i/250, i%250+1)
			}
			sb.WriteString("\n}\n")
		}
		fmt.Fprintf(&sb, "composite c%d {\nsources s%d-0 s%d-1\ndestination 10.200.0.%d\n}\n", c, c, c, c+1)
	}
	sb.WriteString("}")
	cfg, err := parse(caddy.NewTestController("dns", sb.String()), testChecks)
	if err != nil {
		b.Fatal(err)
	}
	board := health.NewBoard(time.Now)
	p := New(cfg, board)
	if err := p.OnStartup(); err != nil {
		b.Fatal(err)
	}
	defer p.OnShutdown()
	b.ReportAllocs()
	for b.Loop() {
		p.evaluate() // the loop is idle: nothing changes on the board
	}
}

// BenchmarkPropagation is the time from a backend verdict to the composite state on the board:
// the board notification, the wake-up of the loop, the recomputation and the Set.
func BenchmarkPropagation(b *testing.B) {
	cfg, err := parse(caddy.NewTestController("dns", "pschealth {\nsource s {\nbackends 10.0.0.1\ncheck web\n}\ncomposite c {\nsources s\ndestination 10.200.0.1\n}\n}"), testChecks)
	if err != nil {
		b.Fatal(err)
	}
	golog.SetOutput(io.Discard) // one line per change: 2000 of them
	defer golog.SetOutput(os.Stderr)
	board := health.NewBoard(time.Now)
	backend := board.Acquire(health.Key{Check: "web", Addr: netip.MustParseAddr("10.0.0.1")})
	dest := board.Acquire(health.Key{Addr: netip.MustParseAddr("10.200.0.1")})
	p := New(cfg, board)
	if err := p.OnStartup(); err != nil {
		b.Fatal(err)
	}
	defer p.OnShutdown()
	states := [2]health.State{health.Unhealthy, health.Healthy}
	for i := 0; b.Loop(); i++ {
		s := states[i%2]
		board.Set(backend, s, "bench")
		for dest.State() != s {
			runtime.Gosched()
		}
	}
}
