package healthcheck

import (
	"runtime"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"go.uber.org/goleak"
)

// leakCheck fails t when goroutines started during t outlive it. It runs after every other
// cleanup of t (listeners, servers), so it sees what really remains.
func leakCheck(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { coretest.NoLeak(t, append(coretest.ServerLoops(), opt)...) })
}

// probes returns the number of (check, target) pairs r probes.
func probes(r *Registry) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.probes)
}

// goroutines counts the process's goroutines but the probe workers, whose number follows the load.
func goroutines() int { return runtime.NumGoroutine() - int(defaultRegistry.workers.Load()) }
