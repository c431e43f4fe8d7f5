package coretest

import (
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/freeport"
)

// FreePort returns a port free for both UDP and TCP on 127.0.0.1, for Corefiles whose server
// blocks share one port (views, an FQDN target resolved through the same server).
func FreePort(tb testing.TB) string {
	tb.Helper()
	port, err := freeport.On("127.0.0.1")
	if err != nil {
		tb.Fatal(err)
	}
	return port
}
