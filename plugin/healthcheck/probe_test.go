package healthcheck

import (
	"context"
	"io"
	golog "log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// listen opens a TCP listener on addr that accepts and closes connections, recording the
// source address of each.
type recorder struct {
	ln    net.Listener
	mu    sync.Mutex
	seen  map[netip.Addr]int
	total int
	done  chan struct{}
}

func listen(t *testing.T, addr string) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{ln: ln, seen: map[netip.Addr]int{}, done: make(chan struct{})}
	go func() {
		defer close(rec.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ap := c.RemoteAddr().(*net.TCPAddr).AddrPort()
			rec.mu.Lock()
			rec.seen[ap.Addr().Unmap()]++
			rec.total++
			rec.mu.Unlock()
			c.Close()
		}
	}()
	t.Cleanup(rec.close)
	return rec
}

func (r *recorder) close() {
	r.ln.Close()
	<-r.done
}

func (r *recorder) addr() netip.AddrPort { return r.ln.Addr().(*net.TCPAddr).AddrPort() }

func runOnce(c *Check, target netip.AddrPort) attempt {
	p := newProber(c, "us-east1", c.source(0, 0))
	return p.run(context.Background(), c, target, probeURL(c, target))
}

// A real TCP listener closed and reopened, through the scheduler: the board target goes
// healthy, unhealthy after the threshold, and healthy again.
func TestTCPListenerClosedAndReopened(t *testing.T) {
	r, clk, b := testRegistry(t)
	rec := listen(t, "127.0.3.1:0")
	target := rec.addr()
	c := grid(1, 1)
	c.Interval, c.Timeout = 10*time.Second, 2*time.Second
	bt := b.Acquire(health.Key{Check: "web", Addr: target.Addr(), Port: target.Port()})
	run := newCheckRun(c)
	p := r.acquire(run, target)
	r.attach(p, bt)
	defer func() { r.detach(p, bt); r.release(p, run) }()
	waitRounds(t, r, 1)
	if bt.State() != health.Healthy {
		t.Fatalf("listener open: %v (%s), want healthy", bt.State(), bt.Status().Reason)
	}
	rec.close()
	for i := uint64(2); i <= 3; i++ {
		clk.Advance(c.Interval)
		waitRounds(t, r, i)
	}
	if st := bt.Status(); st.State != health.Unhealthy || !strings.Contains(st.Reason, "connection refused") {
		t.Fatalf("listener closed: %+v, want unhealthy with connection refused", st)
	}
	listen(t, target.String()) // reopen on the same address and port
	for i := uint64(4); i <= 5; i++ {
		clk.Advance(c.Interval)
		waitRounds(t, r, i)
	}
	if bt.State() != health.Healthy {
		t.Fatalf("listener reopened: %v (%s), want healthy", bt.State(), bt.Status().Reason)
	}
}

// HTTP: status 200 with the content is healthy; 503, a slow answer past the timeout, a body
// without the content and a redirect are failures. The host header and path are sent.
func TestHTTPModes(t *testing.T) {
	var mode atomic.Value
	mode.Store("ok")
	var gotHost, gotPath atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		gotHost.Store(req.Host)
		gotPath.Store(req.URL.RequestURI())
		switch mode.Load().(string) {
		case "ok":
			w.Write([]byte(strings.Repeat("x", 10000) + "ALIVE and well"))
		case "503":
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("ALIVE"))
		case "slow":
			select {
			case <-req.Context().Done():
			case <-time.After(10 * time.Second):
			}
		case "body":
			w.Write([]byte("it is dead, Jim"))
		case "redirect":
			http.Redirect(w, req, "/elsewhere", http.StatusFound)
		}
	}))
	ln, err := net.Listen("tcp", "127.0.3.2:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	target := ln.Addr().(*net.TCPAddr).AddrPort()

	c := grid(1, 1)
	c.Protocol, c.Path, c.Host, c.Content, c.Timeout = HTTP, "/healthz?deep=1", "www.example.org", "ALIVE", 300*time.Millisecond
	tests := []struct {
		mode   string
		want   outcome
		reason string
	}{
		{"ok", success, ""},
		{"503", failure, "status 503"},
		{"slow", failure, "timeout"},
		{"body", failure, `content "ALIVE" not in`},
		{"redirect", failure, "status 302"},
		{"ok", success, ""},
	}
	for _, tc := range tests {
		mode.Store(tc.mode)
		a := runOnce(c, target)
		if a.outcome != tc.want || !strings.Contains(a.reason, tc.reason) {
			t.Errorf("%s: %v %q, want %v %q", tc.mode, a.outcome, a.reason, tc.want, tc.reason)
		}
	}
	if gotHost.Load() != "www.example.org" || gotPath.Load() != "/healthz?deep=1" {
		t.Errorf("request host %v path %v", gotHost.Load(), gotPath.Load())
	}
}

// HC-6: an HTTPS probe does not verify the certificate unless tls_verify is set.
func TestHTTPSSelfSignedHC6(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok"))
	}))
	ln, err := net.Listen("tcp", "127.0.3.3:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Config.ErrorLog = golog.New(io.Discard, "", 0) // the handshake errors are the point
	srv.StartTLS()
	defer srv.Close()
	target := ln.Addr().(*net.TCPAddr).AddrPort()

	c := grid(1, 1)
	c.Protocol, c.Timeout = HTTPS, 2*time.Second
	if a := runOnce(c, target); a.outcome != success {
		t.Fatalf("self-signed without tls_verify: %v %q, want healthy", a.outcome, a.reason)
	}
	c.TLSVerify = true
	if a := runOnce(c, target); a.outcome != failure || !strings.Contains(a.reason, "certificate") {
		t.Fatalf("self-signed with tls_verify: %v %q, want a certificate failure", a.outcome, a.reason)
	}
	// Plain HTTP to a TLS port is a failure, not a crash.
	c.Protocol, c.TLSVerify = HTTP, false
	if a := runOnce(c, target); a.outcome != failure {
		t.Fatalf("http to https port: %v %q, want failure", a.outcome, a.reason)
	}
}

// HC-2: probers are bound to their regions' source addresses; the target sees every one of
// them, probers_per_region times per round.
func TestProberSourcesHC2(t *testing.T) {
	r, _, b := testRegistry(t)
	rec := listen(t, "127.0.3.4:0")
	target := rec.addr()
	c := newCheck("web")
	c.Port, c.ProbersPerRegion = target.Port(), 2
	srcs := []string{"127.0.4.1", "127.0.4.2", "127.0.4.3"}
	for i, name := range []string{"us-east1", "europe-west1", "asia-east1"} {
		c.Regions = append(c.Regions, Region{Name: name, Sources: []netip.Addr{netip.MustParseAddr(srcs[i])}})
	}
	bt := b.Acquire(health.Key{Check: "web", Addr: target.Addr()})
	run := newCheckRun(c)
	p := r.acquire(run, target)
	r.attach(p, bt)
	defer func() { r.detach(p, bt); r.release(p, run) }()
	waitRounds(t, r, 1)
	waitFor(t, "6 connections", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return rec.total == 6 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, s := range srcs {
		if n := rec.seen[netip.MustParseAddr(s)]; n != 2 {
			t.Errorf("source %s seen %d times, want 2 (seen: %v)", s, n, rec.seen)
		}
	}
	if len(rec.seen) != 3 {
		t.Errorf("seen sources %v, want exactly %v", rec.seen, srcs)
	}
	if bt.State() != health.Healthy {
		t.Errorf("%v, want healthy", bt.State())
	}
}

// HC-3: a prober whose source address cannot be bound gives no result, not a failure, and
// the error is logged once. 192.0.2.1 (TEST-NET-1) is not on this host: bind fails locally
// and nothing is sent.
func TestBindFailureIsNoResultHC3(t *testing.T) {
	logs := coretest.CaptureLog(t)

	bad := newCheck("web")
	bad.Regions = []Region{{Name: "us-east1", Sources: []netip.Addr{netip.MustParseAddr("192.0.2.1")}}}
	rec := listen(t, "127.0.3.5:0")
	if a := runOnce(bad, rec.addr()); a.outcome != noResult || a.local == nil {
		t.Fatalf("unbindable source: %v %q, want no result", a.outcome, a.reason)
	}

	r, clk, b := testRegistry(t)
	c := newCheck("web")
	c.Port = rec.addr().Port()
	c.Interval = 10 * time.Second
	c.Regions = []Region{
		{Name: "us-east1", Sources: []netip.Addr{netip.MustParseAddr("127.0.4.4")}},
		{Name: "europe-west1", Sources: []netip.Addr{netip.MustParseAddr("192.0.2.1")}},
	}
	bt := b.Acquire(health.Key{Check: "web", Addr: rec.addr().Addr()})
	run := newCheckRun(c)
	p := r.acquire(run, rec.addr())
	r.attach(p, bt)
	defer func() { r.detach(p, bt); r.release(p, run) }()
	waitRounds(t, r, 1)
	clk.Advance(c.Interval)
	waitRounds(t, r, 2)
	// The unbindable region abstains: 1/1 regions healthy, not 1/2.
	if st := bt.Status(); st.State != health.Healthy || st.Reason != "1/1 regions healthy" {
		t.Fatalf("%+v, want healthy with 1/1 regions", st)
	}
	out := logs.String()
	if n := strings.Count(out, "cannot probe"); n != 1 {
		t.Fatalf("bind failure logged %d times over two rounds, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "192.0.2.1") || !strings.Contains(out, "bind") {
		t.Fatalf("log line does not name the source and the reason:\n%s", out)
	}

	// Only unbindable probers: no verdict at all, the target stays Unknown (served, H-2).
	r2, _, b2 := testRegistry(t)
	bt2 := b2.Acquire(health.Key{Check: "web", Addr: rec.addr().Addr()})
	bad.Port = rec.addr().Port()
	run2 := newCheckRun(bad)
	p2 := r2.acquire(run2, rec.addr())
	r2.attach(p2, bt2)
	defer func() { r2.detach(p2, bt2); r2.release(p2, run2) }()
	waitRounds(t, r2, 1)
	if bt2.State() != health.Unknown {
		t.Fatalf("%v, want unknown when no prober could run", bt2.State())
	}
}

func TestLocalError(t *testing.T) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("::1")}, Timeout: time.Second}
	_, err := d.Dial("tcp", "127.0.0.1:9")
	if err == nil || !localError(err) {
		t.Fatalf("family mismatch %v: want a local error", err)
	}
	if localError(context.DeadlineExceeded) {
		t.Fatal("a timeout is not a local error")
	}
}
