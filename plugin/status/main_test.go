package status

import (
	"os"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/etcdtest"
)

// TestMain runs the tests; started with etcdtest.ReplicaEnv set, the test binary is instead one
// fleet replica serving its status page, a real CoreDNS server in its own process (fleet_test.go).
func TestMain(m *testing.M) {
	if os.Getenv(etcdtest.ReplicaEnv) != "" {
		os.Exit(etcdtest.ServeReplica())
	}
	os.Exit(m.Run())
}
