package kubernetes_test

import (
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/caddy/caddyfile"

	"github.com/coresteer/coresteer/plugin/pkg/chain"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	"github.com/miekg/dns"
)

// host is the loopback address the test server listens on. Any 127.x.y.z is a local address of
// its own on Linux, so health (8080), ready (8181) and prometheus (9153) keep the ports the
// Deployment's probes use without clashing with anything on 127.0.0.1.
const host = "127.53.0.1"

// The example addresses of the ConfigMap (RFC 5737 documentation ranges) are moved to loopback
// for the test, so the health checks probe listeners of this test and no traffic leaves the
// machine.
var exampleToLoopback = map[string]string{
	"192.0.2.10":    "127.0.2.10",
	"192.0.2.11":    "127.0.2.11",
	"198.51.100.10": "127.51.100.10",
}

// rewrite is one change of the ConfigMap's Corefile for the test. Every one must apply: when
// the Corefile changes, the test fails here and says which line to update, rather than quietly
// testing something else.
type rewrite struct{ old, new, why string }

// testCorefile turns the ConfigMap's Corefile into one that runs on this machine as a test.
func testCorefile(t *testing.T, corefile, upstream string, probePort int) string {
	t.Helper()
	// Port 53 needs privileges and belongs to the machine; a free port on our loopback address
	// instead (not 0: the loop plugin sends its probe to the configured port). Both blocks get
	// the same one, so they share one server as in the pod.
	dnsPort := strconv.Itoa(freePort(t))
	rewrites := []rewrite{
		{".:53 {", ".:" + dnsPort + " {\n    bind " + host, "DNS listener"},
		{"steer.example:53 {", "steer.example:" + dnsPort + " {\n    bind " + host, "DNS listener"},
		{"corp.example:53 {", "corp.example:" + dnsPort + " {\n    bind " + host, "DNS listener"},
		{"health {", "health " + host + ":8080 {", "liveness listener"},
		// Shorter lameduck so stopping the test server does not sleep 5 s.
		{"lameduck 5s", "lameduck 100ms", "shutdown delay"},
		{"\n    ready\n", "\n    ready " + host + ":8181\n", "readiness listener"},
		{"prometheus :9153", "prometheus " + host + ":9153", "metrics listener"},
		// An API server that refuses connections: the kubernetes plugin never syncs (and says
		// so in /ready) but must not stop the rest from serving.
		{"kubernetes cluster.local in-addr.arpa ip6.arpa {", "kubernetes cluster.local in-addr.arpa ip6.arpa {\n        endpoint http://127.0.0.1:1", "Kubernetes API"},
		// The node's resolvers are not ours to query; a fake upstream on loopback.
		{"forward . /etc/resolv.conf {", "forward . " + upstream + " {", "upstream resolvers"},
		// The on-prem resolvers are the same fake upstream, declared private for the test.
		{"to 10.0.0.53 10.0.1.53", "to " + upstream + "\n            private 127.0.0.0/8", "on-prem resolvers"},
		// Probe fast, on our listeners' port, so first verdicts come in seconds.
		{"port 80", "port " + strconv.Itoa(probePort), "health-check port"},
		{"interval 30s", "interval 1s", "health-check interval"},
		{"timeout 5s", "timeout 500ms", "health-check timeout"},
	}
	apply := func(r rewrite) {
		if !strings.Contains(corefile, r.old) {
			t.Fatalf("the ConfigMap's Corefile has no %q (%s): update testCorefile", r.old, r.why)
		}
		corefile = strings.ReplaceAll(corefile, r.old, r.new)
	}
	for _, r := range rewrites {
		apply(r)
	}
	for ex, lo := range exampleToLoopback {
		apply(rewrite{ex, lo, "example address"})
	}
	return corefile
}

// freePort returns a port free for both UDP and TCP on host.
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", host+":0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", net.JoinHostPort(host, strconv.Itoa(port)))
		_ = ln.Close()
		if err != nil {
			continue
		}
		_ = pc.Close()
		return port
	}
	t.Fatal("no port free for both UDP and TCP on " + host)
	return 0
}

// unregistered returns the coresteer directives the Corefile uses that this test binary does not
// have (plugins_test.go imports them).
func unregistered(t *testing.T, corefile string) []string {
	t.Helper()
	have := caddy.ListPlugins()["others"] // "dns.NAME" for every registered dns directive
	var missing []string
	for _, b := range parseCorefile(t, corefile) {
		for _, d := range chain.Names() {
			if _, used := b.Tokens[d]; used && !slices.Contains(have, "dns."+d) && !slices.Contains(missing, d) {
				missing = append(missing, d)
			}
		}
	}
	return missing
}

// serverBlocks splits corefile into its top-level server blocks, as text: a block opens on a
// line that starts in column 0 and ends with "{", and closes on a "}" in column 0. The text is
// kept as is, so {$REGION} is left for the server to read.
func serverBlocks(t *testing.T, corefile string) []string {
	t.Helper()
	var (
		out []string
		cur strings.Builder
	)
	for line := range strings.Lines(corefile) {
		switch {
		case cur.Len() == 0 && strings.HasSuffix(strings.TrimSpace(line), "{") && !strings.HasPrefix(line, " "):
			cur.WriteString(line)
		case cur.Len() > 0 && strings.TrimRight(line, "\n") == "}":
			cur.WriteString(line)
			out = append(out, cur.String())
			cur.Reset()
		case cur.Len() > 0:
			cur.WriteString(line)
		}
	}
	if cur.Len() > 0 {
		t.Fatalf("unclosed server block in the Corefile:\n%s", cur.String())
	}
	return out
}

// blocks returns the server blocks of corefile for which keep, given the directives a block
// uses, is true.
func blocks(t *testing.T, corefile string, keep func(directives map[string][]caddyfile.Token) bool) string {
	t.Helper()
	all := serverBlocks(t, corefile)
	out := make([]string, 0, len(all))
	for _, b := range all {
		parsed := parseCorefile(t, b)
		if len(parsed) == 1 && keep(parsed[0].Tokens) {
			out = append(out, b)
		}
	}
	return strings.Join(out, "\n")
}

// usesAny reports whether a block uses any of directives.
func usesAny(directives ...string) func(map[string][]caddyfile.Token) bool {
	return func(used map[string][]caddyfile.Token) bool {
		return slices.ContainsFunc(directives, func(d string) bool { _, ok := used[d]; return ok })
	}
}

// upstream is a resolver on loopback standing in for the node's and the on-prem ones: it answers
// upstream.test. and db.corp.example. with an A record each and everything else (the loop
// plugin's probe among them) with NXDOMAIN.
func upstream(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.53.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	srv := &dns.Server{PacketConn: pc, NotifyStartedFunc: func() { close(started) }, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		answers := map[string]net.IP{"upstream.test.": net.IPv4(127, 53, 0, 99), "db.corp.example.": net.IPv4(127, 53, 0, 98)}
		if q := r.Question; len(q) == 1 && q[0].Qtype == dns.TypeA && answers[q[0].Name] != nil {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
				A:   answers[q[0].Name],
			})
		} else {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

// backends starts an HTTP server answering 200 on /healthz on every loopback stand-in of an
// example address, all on one port (the check probes one port), and returns that port.
func backends(t *testing.T) int {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	addrs := slices.Sorted(maps.Values(exampleToLoopback))
	for range 20 {
		first, err := net.Listen("tcp", addrs[0]+":0")
		if err != nil {
			t.Fatal(err)
		}
		port := first.Addr().(*net.TCPAddr).Port
		lns := []net.Listener{first}
		for _, a := range addrs[1:] {
			ln, err := net.Listen("tcp", net.JoinHostPort(a, strconv.Itoa(port)))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		if len(lns) < len(addrs) {
			for _, ln := range lns {
				_ = ln.Close()
			}
			continue
		}
		for _, ln := range lns {
			srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { _ = srv.Close() })
		}
		return port
	}
	t.Fatal("no port free on every backend address")
	return 0
}

// httpGet returns the status and body of http://host:port/path.
func httpGet(t *testing.T, port int, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://%s:%d%s", host, port, path))
	if err != nil {
		t.Fatalf("GET %s on %d: %v", path, port, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// answerA returns the sorted A addresses of an answer.
func answerA(m *dns.Msg) []string {
	out := make([]string, 0, len(m.Answer))
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	slices.Sort(out)
	return out
}

// TestConfigMapCorefileServes starts the ConfigMap's Corefile with this build (the Kubernetes
// API unreachable), and shows the cluster block and the example zones answer, the probe and
// metrics endpoints respond, and nothing crashes.
func TestConfigMapCorefileServes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real server and waits for the kubernetes plugin's 5 s startup")
	}
	// Not in a cluster: the kubernetes plugin must use the endpoint the test gives it.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	t.Setenv("REGION", "europe-west1")

	c := load(t)
	corefile := testCorefile(t, c.configMap.Data["Corefile"], upstream(t), backends(t))
	missing := unregistered(t, corefile)
	if len(missing) > 0 {
		// plugins_test.go lacks some of our plugins: serve what this binary can, and skip the
		// example zone below, loudly.
		corefile = blocks(t, corefile, func(used map[string][]caddyfile.Token) bool { return !usesAny(missing...)(used) })
	}
	s := coretest.Start(t, corefile)

	t.Run("cluster block forwards", func(t *testing.T) {
		r, err := s.Query("upstream.test.", dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		if got := answerA(r); !slices.Equal(got, []string{"127.53.0.99"}) {
			t.Errorf("upstream.test. A = %v (rcode %s), want the fake upstream's 127.53.0.99", got, dns.RcodeToString[r.Rcode])
		}
	})

	t.Run("private zone forwarded by outbound", func(t *testing.T) {
		if slices.Contains(missing, "outbound") {
			t.Skip("outbound is not imported in plugins_test.go")
		}
		r, err := s.Query("db.corp.example.", dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		if got := answerA(r); !slices.Equal(got, []string{"127.53.0.98"}) {
			t.Errorf("db.corp.example. A = %v (rcode %s), want the resolver's 127.53.0.98", got, dns.RcodeToString[r.Rcode])
		}
	})

	t.Run("cluster zone answers without the API", func(t *testing.T) {
		// Unsynced, the kubernetes plugin has no services to give; what matters is that the
		// query is answered, not dropped, and the server survives it.
		r, err := s.Query("kubernetes.default.svc.cluster.local.", dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("kubernetes.default.svc.cluster.local. A: rcode %s", dns.RcodeToString[r.Rcode])
		if _, err := s.Query("10.0.96.10.in-addr.arpa.", dns.TypePTR); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("probe and metrics endpoints", func(t *testing.T) {
		if code, body := httpGet(t, 8080, "/health"); code != http.StatusOK {
			t.Errorf("liveness /health: %d %q, want 200", code, body)
		}
		// A replica that cannot reach the API is not ready, and ready says who is waiting.
		if code, body := httpGet(t, 8181, "/ready"); code != http.StatusServiceUnavailable || !strings.Contains(body, "kubernetes") {
			t.Errorf("readiness /ready: %d %q, want 503 naming kubernetes", code, body)
		}
		if code, body := httpGet(t, 9153, "/metrics"); code != http.StatusOK || !strings.Contains(body, "coredns_dns_requests_total") {
			t.Errorf("metrics /metrics: %d, coredns_dns_requests_total missing", code)
		}
	})

	t.Run("example zone", func(t *testing.T) {
		if len(missing) > 0 {
			t.Skipf("the example zone needs plugins this test binary does not import: %v (add them to plugins_test.go)", missing)
		}
		www := func(t *testing.T) []string {
			t.Helper()
			r, err := s.Query("www.steer.example.", dns.TypeA)
			if err != nil {
				t.Fatal(err)
			}
			if r.Rcode != dns.RcodeSuccess || !r.Authoritative {
				t.Fatalf("www.steer.example. A: rcode %s, aa %v; want an authoritative NOERROR", dns.RcodeToString[r.Rcode], r.Authoritative)
			}
			return answerA(r)
		}
		if got, want := www(t), []string{"127.0.2.10", "127.0.2.11"}; !slices.Equal(got, want) {
			t.Errorf("REGION=europe-west1: www.steer.example. A = %v, want the europe-west1 item %v", got, want)
		}
		r, err := s.Query("nothing-here.steer.example.", dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		if r.Rcode != dns.RcodeNameError || len(r.Ns) == 0 {
			t.Errorf("nothing-here.steer.example. A: rcode %s with %d authority records, want NXDOMAIN with the SOA", dns.RcodeToString[r.Rcode], len(r.Ns))
		}

		// healthcheck probes the addresses routingpolicy serves: each gets a verdict, healthy
		// since the test's backends answer 200 on /healthz.
		deadline := time.Now().Add(20 * time.Second)
		for _, lo := range slices.Sorted(maps.Values(exampleToLoopback)) {
			k := health.Key{Check: "web", Addr: netip.MustParseAddr(lo)}
			for {
				st, checked := coretest.OnBoard(health.Default, k)
				if checked && st.State != health.Unknown {
					if st.State != health.Healthy {
						t.Errorf("%s: %s, want healthy", k, st.State)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s has no verdict after 20 s (checked: %v)", k, checked)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	})
}

// TestRegionFollowsREGION shows the replica's region reaching routingpolicy through {$REGION}
// (L-2: a client in no configured subnet is located in the server's own region):
// the steer.example block of the ConfigMap answers with the europe-west1 item, then, read again
// with REGION=us-east1 (a reload, as the reload plugin does when the ConfigMap changes, or a pod
// of the us-east1 Deployment), with the us-east1 item.
//
// It runs the example zone's block alone: a second setup of CoreDNS 1.15's kubernetes plugin in
// one process replaces klog's global logger (plugin/kubernetes/setup.go) while the first
// instance's client-go goroutines still log, a data race of CoreDNS's own that -race reports.
func TestRegionFollowsREGION(t *testing.T) {
	if slices.ContainsFunc([]string{"routingpolicy", "healthcheck"}, func(d string) bool {
		return !slices.Contains(caddy.ListPlugins()["others"], "dns."+d)
	}) {
		t.Skip("routingpolicy and healthcheck are not imported in plugins_test.go")
	}
	t.Setenv("REGION", "europe-west1")
	c := load(t)
	corefile := blocks(t, testCorefile(t, c.configMap.Data["Corefile"], upstream(t), backends(t)), usesAny("routingpolicy"))
	if !strings.Contains(corefile, "{$REGION}") {
		t.Fatalf("the routingpolicy block does not read {$REGION}:\n%s", corefile)
	}
	s := coretest.Start(t, corefile)
	www := func(t *testing.T) []string {
		t.Helper()
		r, err := s.Query("www.steer.example.", dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		return answerA(r)
	}
	if got, want := www(t), []string{"127.0.2.10", "127.0.2.11"}; !slices.Equal(got, want) {
		t.Errorf("REGION=europe-west1: www.steer.example. A = %v, want %v", got, want)
	}
	t.Setenv("REGION", "us-east1")
	if err := s.Reload(corefile); err != nil {
		t.Fatalf("reload with REGION=us-east1: %v", err)
	}
	if got, want := www(t), []string{"127.51.100.10"}; !slices.Equal(got, want) {
		t.Errorf("REGION=us-east1: www.steer.example. A = %v, want %v", got, want)
	}
}
