// Package monitoring holds the Prometheus alert rules and the Grafana dashboard of the suite, and
// the tests that keep them true to the code.
package monitoring

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// promtool is Debian's (package prometheus); .ci/run installs it.
const promtool = "/usr/bin/promtool"

// The rules are valid for Prometheus (`promtool check rules`) and each alert fires on the series
// that should fire it and on no others (`promtool test rules alerts_test.yml`).
func TestAlertRules(t *testing.T) {
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v (is Debian's prometheus installed? .ci/run installs it)\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// The alerts the issue asks for are there.
func TestAlertsPresent(t *testing.T) {
	b, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"CoresteerTargetFlapping", "CoresteerCompositeUnhealthy", "CoresteerEgressPairDown", "CoresteerWRRShareSkew"} {
		if !strings.Contains(string(b), "alert: "+name+"\n") {
			t.Errorf("alerts.yml has no alert %s", name)
		}
	}
}

var (
	subsystemRE = regexp.MustCompile(`Subsystem:\s*"(\w+)"`)
	nameRE      = regexp.MustCompile(`Name:\s*"(\w+)"`)
	metricRE    = regexp.MustCompile(`coredns_[a-z0-9_]+`)
)

// metrics returns the metric names the plugins export, read from their metrics.go files (each
// declares its series with Namespace plugin.Namespace, "coredns"), with the suffixes of
// histograms.
func metrics(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("../../plugin/*/metrics.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no metrics.go under plugin/: %v", err)
	}
	out := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// One declaration per promauto.New...Vec call.
		decls := strings.Split(string(b), "promauto.New")
		for _, d := range decls[1:] {
			sub, name := subsystemRE.FindStringSubmatch(d), nameRE.FindStringSubmatch(d)
			if sub == nil || name == nil {
				t.Fatalf("%s: a declaration without Subsystem or Name: %.80q", f, d)
			}
			m := "coredns_" + sub[1] + "_" + name[1]
			out[m] = true
			if strings.HasPrefix(d, "Histogram") {
				out[m+"_bucket"], out[m+"_sum"], out[m+"_count"] = true, true, true
			}
		}
	}
	return out
}

// Every metric the rules, their tests and the dashboard name is one the code exports (issue 13
// added server and zone labels to outbound's; a renamed metric must fail here, not in production).
func TestMetricNamesExist(t *testing.T) {
	known := metrics(t)
	for _, m := range []string{"coredns_healthcheck_target_state", "coredns_outbound_up", "coredns_routingpolicy_answers_total", "coredns_pschealth_composite_state"} {
		if !known[m] {
			t.Fatalf("the metrics.go files do not declare %s: the reader is broken", m)
		}
	}
	used := map[string]bool{}
	for _, f := range []string{"alerts.yml", "alerts_test.yml", "dashboard.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range metricRE.FindAllString(string(b), -1) {
			used[m] = true
			if !known[m] {
				t.Errorf("%s names %s, which no metrics.go declares", f, m)
			}
		}
	}
	// The dashboard shows every family the plugins export.
	for m := range known {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
		if !used[base] && !used[base+"_bucket"] {
			t.Errorf("neither the rules nor the dashboard use %s", base)
		}
	}
}

// The dashboard is a Grafana dashboard: JSON with unique panel ids, and a query in every panel.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard uid %q, title %q, %d panels", d.UID, d.Title, len(d.Panels))
	}
	var ids []int
	for _, p := range d.Panels {
		if slices.Contains(ids, p.ID) {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids = append(ids, p.ID)
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if strings.TrimSpace(q.Expr) == "" {
				t.Errorf("panel %q has an empty query", p.Title)
			}
		}
	}
}
