package outbound

import (
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"go.uber.org/goleak"
)

// Goroutines start in OnStartup and stop in OnShutdown: a reload and a stop leave nothing behind.
func TestReloadNoLeak(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	// The harness's first start loads every plugin package once; do it before the snapshot.
	warm, err := coretest.New("warm.:0 {\nbind 127.0.0.1\nwhoami\n}")
	if err != nil {
		t.Fatal(err)
	}
	warm.Stop()
	snapshot := goleak.IgnoreCurrent()

	s, err := coretest.New(twoEndpoints(r.addr, ""))
	if err != nil {
		t.Fatal(err)
	}
	mustQuery(t, s, "127.0.1.1", "a.example.")
	if err := s.Reload(twoEndpoints(r.addr, "timeout 2s")); err != nil {
		t.Fatal(err)
	}
	mustQuery(t, s, "127.0.2.1", "b.example.")
	if err := s.Reload(twoEndpoints(r.addr, "")); err != nil {
		t.Fatal(err)
	}
	mustQuery(t, s, "127.0.1.1", "c.example.")
	s.Stop()
	goleak.VerifyNone(t, append(coretest.ServerLoops(), snapshot)...)
}
