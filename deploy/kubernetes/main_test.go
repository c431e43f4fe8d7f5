package kubernetes_test

import (
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: stopping the server must stop
// everything the Corefile's plugins started. The exceptions are CoreDNS's and client-go's own,
// named one by one, so a goroutine left by a coresteer plugin still fails the run.
func TestMain(m *testing.M) {
	coretest.VerifyTestMain(m,
		// forward stops its proxies' health probes on shutdown but leaves each transport's
		// connection manager to a finalizer (CoreDNS 1.15, plugin/pkg/proxy).
		goleak.IgnoreAnyFunction("github.com/coredns/coredns/plugin/pkg/proxy.(*Transport).connManager"),
		// loop disables itself 2 s after its probe came back, from a goroutine of its own.
		goleak.IgnoreAnyFunction("github.com/coredns/coredns/plugin/loop.setup.func2.1"),
		goleak.IgnoreAnyFunction("github.com/coredns/coredns/plugin/loop.setup.func2.1.1"),
		// The kubernetes plugin's informers, pointed at an API that refuses connections, sit in
		// client-go's retry backoff, which does not watch the stop channel; they end after it.
		goleak.IgnoreAnyFunction("k8s.io/client-go/tools/cache.(*Reflector).RunWithContext"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/tools/cache.(*controller).RunWithContext"),
	)
}
