package status

import (
	"context"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// chromium is Debian's headless browser (package chromium); .ci/run installs it.
const chromium = "/usr/bin/chromium"

// dumpDOM loads url in headless Chromium and returns the DOM it built.
func dumpDOM(t *testing.T, u string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
		"--disable-dev-shm-usage", "--user-data-dir="+t.TempDir(), "--dump-dom", u)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v (is Debian's chromium installed? .ci/run installs it)", u, err)
	}
	return string(out)
}

// S-1: the page, loaded in a real browser, shows the targets with their per-region view, the
// load balancer, the composite, the record sets and the egress endpoints; it has no script. The
// explain page shows a WRR split as probabilities (S-2).
func TestPageInBrowser(t *testing.T) {
	_, base, _ := startFull(t)
	waitFor(t, "verdicts", func() bool {
		_, body := get(t, base+"/status.json?section=targets")
		return strings.Contains(body, `"state": "healthy"`) && !strings.Contains(body, `"state": "unknown"`)
	})
	dom := dumpDOM(t, base+"/")
	for _, want := range []string{
		"127.0.77.1", "check web", "us-east1", "europe-west1", // targets and their prober regions
		"127.0.77.100", "2/2 = 100 % &gt;= 20 %", // the load balancer
		"shop", "127.0.77.200", // the composite
		"www.example.org.", "app.example.org.", "answering: primary", // record sets
		"egress-us", "egress-eu", "127.0.0.11", // endpoints
		"fleet off",
		`href="/status.json?section=targets"`, `http-equiv="refresh"`, `name="viewport"`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page's DOM lacks %q", want)
		}
	}
	if strings.Contains(strings.ToLower(dom), "<script") {
		t.Error("the page has a script")
	}
	dom = dumpDOM(t, base+"/explain?"+url.Values{"name": {"www.example.org"}, "type": {"A"}, "client": {"127.0.2.9"}}.Encode())
	for _, want := range []string{"wrr", "<b>0.7</b>", "<b>0.3</b>", "europe-west1", "127.0.2.0/24"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the explain page's DOM lacks %q", want)
		}
	}
}
