package status

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"

	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/readme"
	"github.com/coresteer/coresteer/plugin/pkg/statusview"
)

// The pages never panic on any query string: every request is a 200 or a 400 naming a parameter
// (issue 15: fuzz the query parameters). The seeds are in testdata/fuzz/FuzzParams; the server
// behind is a real one with every plugin, so explain runs routingpolicy's and outbound's code.
func FuzzParams(f *testing.F) {
	for _, q := range []string{
		"name=www.example.org&type=A&client=127.0.2.9",
		"name=shop.example.org&type=AAAA&client=::1&ecs=2001:db8::/32",
		"name=corp.internal&type=TYPE65&client=127.0.0.1&ecs=0.0.0.0/0",
		"name=%00&type=A&client=1.1.1.1",
		"section=recordsets",
	} {
		f.Add(q)
	}
	startFull(f)
	h := New("", statusview.Default, health.Default).Handler()
	f.Fuzz(func(t *testing.T, q string) {
		for _, path := range []string{"/explain.json", "/explain", "/status.json"} {
			r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: path, RawQuery: q}, Header: http.Header{}}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusOK && w.Code != http.StatusBadRequest {
				t.Fatalf("%s?%s: %d %s", path, q, w.Code, w.Body)
			}
		}
	})
}

// FuzzParse: `status [ADDRESS]` either fails with an error that says where (Testfile:LINE) or
// once per server block, or gives the default loopback address (S-1) when none is written, and
// else the address written, a HOST:PORT whose port the listener can take (a number or a service
// name). Seeds: every README example and the shapes of TestParse.
func FuzzParse(f *testing.F) {
	blocks, err := readme.Directive("README.md", "status")
	if err != nil || len(blocks) == 0 {
		f.Fatalf("README blocks: %v", err)
	}
	for _, s := range append(blocks, "status", "status 127.0.0.1:9000", "status [::1]:9000", "status :9000",
		"status 127.0.0.1", "status a b", "status {\n  foo\n}", "status\nstatus :9000", "status :http",
		"status [fe80::1%lo]:0", "status {\n}") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		addr, err := parse(caddy.NewTestController("dns", in))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "Testfile:") && !errors.Is(err, plugin.ErrOnce) {
				t.Fatalf("%q: the error %q does not say where", in, err)
			}
			return
		}
		c := caddy.NewTestController("dns", in)
		var args []string
		if c.Next() {
			args = c.RemainingArgs()
		}
		if len(args) == 0 {
			if addr != defaultAddr {
				t.Fatalf("%q parsed to %q, want the default %q (S-1)", in, addr, defaultAddr)
			}
			return
		}
		if addr != args[0] {
			t.Fatalf("%q parsed to %q, want the address written, %q", in, addr, args[0])
		}
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("%q parsed to %q, which is not HOST:PORT: %v", in, addr, err)
		}
		if _, err := net.LookupPort("tcp", port); err != nil {
			t.Fatalf("%q parsed to %q, whose port the listener cannot take: %v", in, addr, err)
		}
	})
}
