package pschealth_test

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/coresteer/coresteer/plugin/healthcheck"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/health"
	_ "github.com/coresteer/coresteer/plugin/pschealth"
	_ "github.com/coresteer/coresteer/plugin/routingpolicy"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// backend is an HTTP server on a 127.0.x.y address whose health endpoint can be broken.
type backend struct {
	addr   string // ip:port
	broken atomic.Bool
}

func newBackend(t *testing.T, ip string) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	b := &backend{addr: ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if b.broken.Load() {
			http.Error(w, "broken", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return b
}

// region is one published service: a composite over two sources of two HTTP backends each.
type region struct {
	name      string
	web, api  []*backend
	dest      string
	destKey   health.Key
	composite string
}

func newRegion(t *testing.T, name string, octet int) *region {
	t.Helper()
	r := &region{name: name, dest: fmt.Sprintf("127.0.9.%d", octet), composite: "svc-" + name}
	r.destKey = health.Key{Addr: netip.MustParseAddr(r.dest)}
	for i := 1; i <= 2; i++ {
		r.web = append(r.web, newBackend(t, fmt.Sprintf("127.0.%d.%d", octet, i)))
		r.api = append(r.api, newBackend(t, fmt.Sprintf("127.0.%d.%d", octet, 10+i)))
	}
	return r
}

func addrs(bs []*backend) string {
	out := make([]string, 0, len(bs))
	for _, b := range bs {
		out = append(out, b.addr)
	}
	return strings.Join(out, " ")
}

func (r *region) pschealth() string {
	return fmt.Sprintf(`
		source web-%[1]s {
			backends %[2]s
			check web
		}
		source api-%[1]s {
			backends %[3]s
			check web
			policy all
		}
		composite svc-%[1]s {
			sources web-%[1]s api-%[1]s
			destination %[4]s
		}`, r.name, addrs(r.web), addrs(r.api), r.dest)
}

func (r *region) breakWeb(broken bool) {
	for _, b := range r.web {
		b.broken.Store(broken)
	}
}

// corefile builds a server with healthcheck probing every second and pschealth over both
// regions; more is appended inside the server block (a routingpolicy zone).
func corefile(a, b *region, dryRun bool, more string) string {
	dry := ""
	if dryRun {
		dry = "dry_run"
	}
	return fmt.Sprintf(`example.org:0 {
	bind 127.0.0.1
	healthcheck {
		check web {
			protocol http
			path /healthz
			interval 1s
			timeout 500ms
			healthy_threshold 1
			unhealthy_threshold 1
		}
	}
	pschealth {
		policy all min_healthy_percent 100 min_healthy 2
		%s
		%s
		%s
	}
	%s
}
`, a.pschealth(), b.pschealth(), dry, more)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 20s waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// destState is the state of a destination on the process board, and whether it is published.
func destState(k health.Key) (health.State, bool) {
	st, checked := coretest.OnBoard(health.Default, k)
	return st.State, checked
}

// compositeMetric reads coredns_pschealth_composite_state for composite and state.
func compositeMetric(t *testing.T, composite, state string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "coredns_pschealth_composite_state" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["composite"] == composite && labels["state"] == state {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// The routingpolicy zone: a failover record set (primary region A, backup region B) and a geo
// record set (the server is in us-east1, region A's location) whose addresses are the two
// destinations, with no check of their own: they follow the composites.
const zone = `routingpolicy {
		region us-east1
		failover fo A 30 "127.0.9.1" "europe-west1=127.0.9.2"
		geo geo A 30 "us-east1=127.0.9.1;europe-west1=127.0.9.2"
	}`

// answers returns the A answers for name, sorted and joined.
func answers(t *testing.T, s *coretest.Server, name string) string {
	t.Helper()
	m, err := s.Query(name, dns.TypeA)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	return strings.Join(out, ",")
}

// servedBy reports whether both record sets answer with dest.
func servedBy(t *testing.T, s *coretest.Server, dest string) bool {
	t.Helper()
	return answers(t, s, "fo.example.org.") == dest && answers(t, s, "geo.example.org.") == dest
}

// Through a real server, real HTTP probes on 127.0.x.y: two regions, each a published service
// (a composite over two sources of two backends). Breaking region A's web backends fails its
// policy: the failover and geo answers move to region B; repairing them brings the answers back
// (P-1..P-4, R-FO-2, R-GEO-4). With dry_run the answers never move, while the logs and the metrics
// show the change (P-6). A real caddy reload in the middle keeps the composite state (H-4).
func TestEndToEndFailover(t *testing.T) {
	for _, dry := range []bool{false, true} {
		t.Run(map[bool]string{false: "published", true: "dry_run"}[dry], func(t *testing.T) {
			logs := coretest.CaptureLog(t)
			a, b := newRegion(t, "a", 1), newRegion(t, "b", 2)
			cf := corefile(a, b, dry, zone)
			s := coretest.Start(t, cf)

			waitFor(t, "both composites healthy", func() bool {
				return compositeMetric(t, "svc-a", "healthy") == 1 && compositeMetric(t, "svc-b", "healthy") == 1
			})
			if !servedBy(t, s, a.dest) {
				t.Fatalf("region A healthy: fo %s geo %s, want %s", answers(t, s, "fo.example.org."), answers(t, s, "geo.example.org."), a.dest)
			}
			if st, checked := destState(a.destKey); checked == dry || (!dry && st != health.Healthy) {
				t.Fatalf("destination A: %s checked %v", st, checked)
			}

			a.breakWeb(true)
			waitFor(t, "svc-a unhealthy", func() bool { return compositeMetric(t, "svc-a", "unhealthy") == 1 })
			st, checked := destState(a.destKey)
			if dry && (checked || st != health.Unknown) {
				t.Errorf("dry run published: %s checked %v", st, checked)
			}
			if !dry && st != health.Unhealthy {
				t.Errorf("destination A %s, want unhealthy", st)
			}
			if st, _ := destState(b.destKey); !dry && st != health.Healthy {
				t.Errorf("destination B %s", st)
			}
			if dry {
				// P-6: consumers unaffected.
				if !servedBy(t, s, a.dest) {
					t.Errorf("dry run moved the answers: fo %s geo %s", answers(t, s, "fo.example.org."), answers(t, s, "geo.example.org."))
				}
			} else {
				waitFor(t, "answers moved to region B", func() bool { return servedBy(t, s, b.dest) })
			}
			// The metric is set just before the line is written: wait for it. Probes are not
			// synchronised, so the first failing web backend (1/2 = 50 %) already fails web-a.
			waitFor(t, "the change logged", func() bool {
				return logs.Count(`"svc-a"`, "unhealthy, was healthy", `source "web-a" `, `below policy "default" (min_healthy_percent 60, min_healthy 1)`) == 1
			})

			// H-4: a real reload keeps the verdict and logs nothing new.
			before, _ := coretest.OnBoard(health.Default, a.destKey)
			lines := logs.Count(`"svc-a"`)
			if err := s.Reload(cf + "\n# reloaded\n"); err != nil {
				t.Fatal(err)
			}
			if !dry {
				if st, checked := coretest.OnBoard(health.Default, a.destKey); st != before || !checked {
					t.Errorf("reload changed destination A: %+v -> %+v (published %v)", before, st, checked)
				}
			}
			if compositeMetric(t, "svc-a", "unhealthy") != 1 {
				t.Error("composite metric lost at reload")
			}
			if n := logs.Count(`"svc-a"`); n != lines {
				t.Errorf("reload logged %d lines about svc-a", n-lines)
			}
			// Right after the reload, before any new probe: still the same answers.
			want := b.dest
			if dry {
				want = a.dest
			}
			if !servedBy(t, s, want) {
				t.Errorf("after reload: fo %s geo %s, want %s", answers(t, s, "fo.example.org."), answers(t, s, "geo.example.org."), want)
			}

			a.breakWeb(false)
			waitFor(t, "svc-a healthy again", func() bool { return compositeMetric(t, "svc-a", "healthy") == 1 })
			if st, _ := destState(a.destKey); !dry && st != health.Healthy {
				t.Errorf("destination A %s after repair", st)
			}
			waitFor(t, "answers back in region A", func() bool { return servedBy(t, s, a.dest) })
			if dry {
				waitFor(t, "the dry-run repair logged", func() bool {
					return logs.Count("Dry run:", `"svc-a"`, "would be healthy, was unhealthy") == 1
				})
			}
		})
	}
}

// A destination that is also a healthcheck loadbalancer VIP: healthcheck starts first and
// publishes the VIP; pschealth logs the clash and leaves the address to the load balancer.
func TestEndToEndVIPClash(t *testing.T) {
	logs := coretest.CaptureLog(t)
	a, b := newRegion(t, "a", 1), newRegion(t, "b", 2)
	lb := fmt.Sprintf(`healthcheck {
		check api {
			protocol http
			interval 1s
			timeout 500ms
			healthy_threshold 1
			unhealthy_threshold 1
		}
		loadbalancer %s {
			backends %s
			check api
		}
	}`, a.dest, addrs(b.api))
	// The load balancer is in a second server block of the same Corefile (one healthcheck
	// block per server block).
	cf := corefile(a, b, false, "") + "\nexample.net:0 {\n\tbind 127.0.0.1\n\t" + lb + "\n}\n"
	coretest.Start(t, cf)
	if n := logs.Count("[ERROR] plugin/pschealth", "Destination 127.0.9.1 of composite \"svc-a\" is already published by another writer"); n != 1 {
		t.Errorf("%d clash lines, want 1", n)
	}
	a.breakWeb(true)
	waitFor(t, "svc-a computed unhealthy", func() bool { return compositeMetric(t, "svc-a", "unhealthy") == 1 })
	if st, checked := destState(a.destKey); st == health.Unhealthy || !checked {
		t.Errorf("VIP overwritten by the composite: %s checked %v", st, checked)
	}
}
