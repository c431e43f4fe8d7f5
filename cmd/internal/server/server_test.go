package server

import (
	"strings"
	"testing"

	"github.com/coredns/caddy"
)

// `coredns -version` names the suite and its version next to CoreDNS's.
func TestVersion(t *testing.T) {
	SetVersion()
	if !strings.HasPrefix(caddy.AppVersion, "1.15.0 (coresteer ") {
		t.Fatalf("version %q, want CoreDNS's version and the suite's", caddy.AppVersion)
	}
}
