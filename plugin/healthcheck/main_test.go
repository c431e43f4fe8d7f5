package healthcheck

import (
	"os"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/etcdtest"
)

// TestMain fails the package when any goroutine outlives the tests: the scheduler, probes in
// flight, load-balancer loops, listeners, fleet sessions. Started with etcdtest.ReplicaEnv set,
// the test binary is instead one fleet replica, a real CoreDNS server in its own process
// (replica_test.go).
func TestMain(m *testing.M) {
	if os.Getenv(etcdtest.ReplicaEnv) != "" {
		os.Exit(etcdtest.ServeReplica())
	}
	coretest.VerifyTestMain(m, coretest.ServerLoops()...)
}
