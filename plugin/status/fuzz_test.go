package status

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/health"
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
