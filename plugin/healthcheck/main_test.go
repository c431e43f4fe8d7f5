package healthcheck

import (
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"go.uber.org/goleak"
)

// TestMain fails the package when any goroutine outlives the tests: the scheduler, probes in
// flight, load-balancer loops, listeners.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, coretest.ServerLoops()...) }
