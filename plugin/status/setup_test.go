package status

import (
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"
)

// The syntax `status [ADDRESS]`, loopback by default (S-1, S-3); every bad input is an error that
// names it.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in, addr, err string
	}{
		{"status", defaultAddr, ""},
		{"status 127.0.0.1:9000", "127.0.0.1:9000", ""},
		{"status [::1]:9000", "[::1]:9000", ""},
		{"status :9000", ":9000", ""},
		{"status 127.0.0.1", "", `Testfile:1 - Error during parsing: address "127.0.0.1" is not HOST:PORT`},
		{"status 127.0.0.1:http", "127.0.0.1:http", ""}, // a service name, as the listener takes
		{"status 127.0.0.1:no-such-service", "", `Testfile:1 - Error during parsing: address "127.0.0.1:no-such-service": port "no-such-service" is neither a number of 0..65535 nor a known service name`},
		{"status 127.0.0.1:65536", "", `port "65536" is neither a number`},
		{"status localhost:0", "localhost:0", ""},
		{"status a b", "", "Wrong argument count"},
		{"status {\n  foo\n}", "", `unknown property "foo"`},
		{"status\nstatus :9000", "", "this plugin"},
	} {
		addr, err := parse(caddy.NewTestController("dns", tc.in))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
		case tc.err == "" && addr != tc.addr:
			t.Errorf("%q: address %q, want %q", tc.in, addr, tc.addr)
		}
	}
}

// Like health and ready, once per process: a second server block with status is refused.
func TestOncePerProcess(t *testing.T) {
	_, err := coretest.New(`.:0 {
	bind 127.0.0.1
	status 127.0.0.1:0
}
example.:0 {
	bind 127.0.0.1
	status 127.0.0.1:0
}`)
	if err == nil || !strings.Contains(err.Error(), "one server block only") {
		t.Fatalf("two status blocks: %v", err)
	}
}

// S-3: status adds nothing to the query path: setup adds no handler to the server block's chain.
func TestSetupAddsNoHandlerS3(t *testing.T) {
	c := caddy.NewTestController("dns", "status 127.0.0.1:0")
	if err := setup(c); err != nil {
		t.Fatal(err)
	}
	if n := len(dnsserver.GetConfig(c).Plugin); n != 0 {
		t.Errorf("status added %d handlers to the chain, want none (S-3)", n)
	}
}
