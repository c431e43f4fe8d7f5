package test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
)

// probeTargets are real HTTP servers on loopback addresses, one port for all, that count the
// probes they receive by path (one per check: /CHECK) and source address. Addresses listed in
// failing answer 503.
type probeTargets struct {
	port    uint16
	servers []*http.Server

	mu   sync.Mutex
	seen map[probeKey]*probeSeen
}

// probeKey is one (check, target, prober source) triple.
type probeKey struct {
	check, target, source string
}

type probeSeen struct {
	n    int
	last time.Time
}

// startProbeTargets listens on every address of addrs on one port free on all of them.
func startProbeTargets(t *testing.T, addrs []string, failing ...string) *probeTargets {
	t.Helper()
	pt := &probeTargets{seen: map[probeKey]*probeSeen{}}
	handler := func(target string, ok bool) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			src, _, _ := net.SplitHostPort(r.RemoteAddr)
			k := probeKey{check: strings.TrimPrefix(r.URL.Path, "/"), target: target, source: src}
			pt.mu.Lock()
			s := pt.seen[k]
			if s == nil {
				s = &probeSeen{}
				pt.seen[k] = s
			}
			s.n++
			s.last = time.Now()
			pt.mu.Unlock()
			if !ok {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			io.WriteString(w, "ok\n")
		})
	}
	for range 20 {
		lns, err := listenAll(addrs)
		if err != nil {
			continue // the port is taken on one of the addresses: another one
		}
		_, p, _ := net.SplitHostPort(lns[0].Addr().String())
		n, _ := strconv.Atoi(p)
		pt.port = uint16(n)
		for i, ln := range lns {
			srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: handler(addrs[i], !slices.Contains(failing, addrs[i]))}
			srv.SetKeepAlivesEnabled(false)
			pt.servers = append(pt.servers, srv)
			go func() { _ = srv.Serve(ln) }()
		}
		t.Cleanup(pt.close)
		return pt
	}
	t.Fatal("no port free on every probe target address")
	return nil
}

// listenAll listens on one port on every address: the first one's, chosen by the kernel.
func listenAll(addrs []string) ([]net.Listener, error) {
	first, err := net.Listen("tcp", addrs[0]+":0")
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(first.Addr().String())
	lns := []net.Listener{first}
	for _, a := range addrs[1:] {
		ln, err := net.Listen("tcp", net.JoinHostPort(a, port))
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

func (pt *probeTargets) close() {
	for _, s := range pt.servers {
		_ = s.Close()
	}
	pt.servers = nil
}

// count returns how many probes k received and when the last one came.
func (pt *probeTargets) count(k probeKey) (int, time.Time) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if s := pt.seen[k]; s != nil {
		return s.n, s.last
	}
	return 0, time.Time{}
}

// waitProbe waits until k receives a probe after since, or fails t at the deadline.
func (pt *probeTargets) waitProbe(t *testing.T, k probeKey, since time.Time, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if _, last := pt.count(k); last.After(since) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v: no probe within %s", k, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// busyListener holds a fresh TCP port of 127.0.0.1, which a server block of a reload then cannot
// bind, until the returned function is called.
func busyListener(t *testing.T) (release func(), port string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	return func() { ln.Close() }, port
}

// seriesOf returns the sorted distinct values of label over the series of metric name: scraped
// from the prometheus plugin at url, or read from the process registry when url is empty.
func seriesOf(t *testing.T, url, name, label string) []string {
	t.Helper()
	return labelValues(scrape(t, url, name), label)
}

// scrape returns the label sets of the series of metric name, from url (the prometheus plugin's
// /metrics) or, for an empty url, from the process registry.
func scrape(t *testing.T, url, name string) []map[string]string {
	t.Helper()
	if url == "" {
		return coretest.Series(t, name)
	}
	return parseSeries(t, fetchMetrics(t, url), name)
}

// parseSeries returns the label sets of the series of metric name in body, a text exposition.
func parseSeries(t *testing.T, body, name string) []map[string]string {
	t.Helper()
	samples := parseMetrics(t, body)[name]
	out := make([]map[string]string, 0, len(samples))
	for _, s := range samples {
		out = append(out, s.labels)
	}
	return out
}

// metricSample is one series of a text exposition: its labels and value.
type metricSample struct {
	labels map[string]string
	value  float64
}

// parseMetrics reads a text exposition once: the series of every metric, by name (histograms by
// their _bucket, _sum and _count names).
func parseMetrics(t *testing.T, body string) map[string][]metricSample {
	t.Helper()
	out := map[string][]metricSample{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end < 0 {
			continue
		}
		name, rest := line[:end], line[end:]
		s := metricSample{labels: map[string]string{}}
		if strings.HasPrefix(rest, "{") {
			rb := strings.LastIndex(rest, "}")
			for _, m := range labelRE.FindAllStringSubmatch(rest[1:rb], -1) {
				v, err := strconv.Unquote(`"` + m[2] + `"`)
				if err != nil {
					t.Fatalf("label %s in %q: %v", m[1], line, err)
				}
				s.labels[m[1]] = v
			}
			rest = rest[rb+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			t.Fatalf("no value in %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			t.Fatalf("value of %q: %v", line, err)
		}
		s.value = v
		out[name] = append(out[name], s)
	}
	return out
}

// labelValues returns the sorted distinct values of label in series.
func labelValues(series []map[string]string, label string) []string {
	var out []string
	for _, l := range series {
		if v, ok := l[label]; ok {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// metricsClient keeps no idle connection: the test counts its file descriptors.
var metricsClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}

// fetchMetrics reads url, retrying for a while: the prometheus plugin's listener is handed from
// instance to instance across a reload.
func fetchMetrics(t *testing.T, url string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := metricsClient.Get(url)
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr == nil && resp.StatusCode == http.StatusOK {
				return string(b)
			}
			err = fmt.Errorf("status %d, %v", resp.StatusCode, rerr)
		}
		if time.Now().After(deadline) {
			t.Fatalf("scraping %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// counterValue returns the value of the series of metric name whose labels include want, or 0.
func counterValue(t *testing.T, url, name string, want map[string]string) float64 {
	t.Helper()
	for _, s := range parseMetrics(t, fetchMetrics(t, url))[name] {
		match := true
		for k, v := range want {
			if s.labels[k] != v {
				match = false
			}
		}
		if match {
			return s.value
		}
	}
	return 0
}

// openFDsBut counts the open file descriptors of the process, but for the sockets whose local
// address (IP:PORT) is one of skip.
func openFDsBut(t *testing.T, skip []string) int {
	t.Helper()
	local := socketAddrs(t)
	n := 0
	for _, target := range fdTargets(t) {
		if inode, ok := strings.CutPrefix(target, "socket:["); ok && slices.Contains(skip, local[strings.TrimSuffix(inode, "]")]) {
			continue
		}
		n++
	}
	return n
}

// fdTargets returns what the open file descriptors of the process point to.
func fdTargets(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil {
			out = append(out, l)
		}
	}
	return out
}

// socketAddrs maps the inodes of the process's IPv4 sockets to their local IP:PORT.
func socketAddrs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/udp"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 10 {
				continue
			}
			ip, port, ok := strings.Cut(fields[1], ":")
			a, err1 := strconv.ParseUint(ip, 16, 32)
			p, err2 := strconv.ParseUint(port, 16, 16)
			if !ok || err1 != nil || err2 != nil {
				continue
			}
			// The kernel prints the address in host byte order: little-endian here.
			addr := netip.AddrFrom4([4]byte{byte(a), byte(a >> 8), byte(a >> 16), byte(a >> 24)})
			out[fields[9]] = netip.AddrPortFrom(addr, uint16(p)).String()
		}
	}
	return out
}

// addrPort formats a target as the healthcheck metrics label it: ADDRESS:PORT.
func addrPort(addr string, port uint16) string {
	return netip.AddrPortFrom(netip.MustParseAddr(addr), port).String()
}
