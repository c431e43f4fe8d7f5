package healthcheck

import (
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	"go.uber.org/goleak"
)

// leakCheck fails t when goroutines started during t outlive it. It runs after every other
// cleanup of t (listeners, servers), so it sees what really remains.
func leakCheck(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, append(coretest.ServerLoops(), opt)...) })
}

// probes returns the number of (check, target) pairs r probes.
func probes(r *Registry) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.probes)
}

// onBoard returns the status of k on b and whether something publishes it. It holds k only
// while it looks.
func onBoard(b *health.Board, k health.Key) (health.Status, bool) {
	t := b.Acquire(k)
	defer b.Release(t)
	return t.Status(), t.Checked()
}
