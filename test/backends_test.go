package test

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
)

// webPort is the port of every test web backend; each scenario uses its own 127.0.X.0/24.
const webPort = 18081

// backend is a real HTTP server on one loopback address whose health endpoint can be failed.
type backend struct {
	addr string
	ok   atomic.Bool
	srv  *http.Server
}

// startBackends starts a healthy web backend on each address, stopped when t ends.
func startBackends(t *testing.T, addrs ...string) map[string]*backend {
	t.Helper()
	out := make(map[string]*backend, len(addrs))
	for _, a := range addrs {
		ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", a, webPort))
		if err != nil {
			t.Fatalf("backend %s: %v", a, err)
		}
		b := &backend{addr: a}
		b.ok.Store(true)
		b.srv = &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if !b.ok.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})}
		go func() { _ = b.srv.Serve(ln) }()
		t.Cleanup(func() { _ = b.srv.Close() })
		out[a] = b
	}
	return out
}

// webCheck is a healthcheck block with one fast HTTP check named web.
func webCheck(extra string) string {
	return fmt.Sprintf(`healthcheck {
		check web {
			protocol http
			port %d
			path /healthz
			interval 1s
			timeout 500ms
			healthy_threshold 1
			unhealthy_threshold 1
		}
		%s
	}`, webPort, extra)
}

// answerSet returns the A records of r, sorted and joined by spaces.
func answerSet(r *dns.Msg) string {
	var out []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// ask queries name A from the client address from and fails the test on a transport error or
// a failure rcode.
func ask(t *testing.T, s *coretest.Server, from, name string) string {
	t.Helper()
	var (
		r   *dns.Msg
		err error
	)
	if from == "" {
		r, err = s.Query(name, dns.TypeA)
	} else {
		r, err = s.QueryFrom(from, name, dns.TypeA)
	}
	if err != nil {
		t.Fatal(err)
	}
	if r.Rcode != dns.RcodeSuccess {
		t.Fatalf("%s: rcode %s", name, dns.RcodeToString[r.Rcode])
	}
	return answerSet(r)
}

// waitFor polls name from the client from until the answer set equals want, or fails after 15 s.
// Health changes need one or two probe intervals (1 s) to show; the deadline is generous, the
// poll returns as soon as the answer is there.
func waitFor(t *testing.T, s *coretest.Server, from, name, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		if got = ask(t, s, from, name); got == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s from %q: answers %q, want %q within 15s", name, from, got, want)
}

// waitGone polls name from the client from until 100 answers in a row leave addr out, or fails
// after 15 s: for answers that are drawn at random, one answer without addr proves nothing.
func waitGone(t *testing.T, s *coretest.Server, from, name, addr string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		count := tally(t, s, from, name, 100)
		served := 0
		for set, n := range count {
			if strings.Contains(" "+set+" ", " "+addr+" ") {
				served += n
			}
		}
		if served == 0 {
			return
		}
	}
	t.Fatalf("%s from %q: %s still served after 15s", name, from, addr)
}

// tally asks n times and counts each answer set.
func tally(t *testing.T, s *coretest.Server, from, name string, n int) map[string]int {
	t.Helper()
	count := make(map[string]int)
	for range n {
		count[ask(t, s, from, name)]++
	}
	return count
}

// load runs queries for name from workers goroutines until stop is closed and counts the ones
// that failed (transport error or an rcode other than NOERROR).
type load struct {
	sent, failed atomic.Int64
	stop         chan struct{}
	wg           sync.WaitGroup
}

func startLoad(s *coretest.Server, name string, workers int) *load {
	l := &load{stop: make(chan struct{})}
	for range workers {
		l.wg.Go(func() {
			c := &dns.Client{Timeout: 2 * time.Second}
			m := new(dns.Msg)
			m.SetQuestion(dns.Fqdn(name), dns.TypeA)
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				l.sent.Add(1)
				r, _, err := c.Exchange(m, s.UDP)
				if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
					l.failed.Add(1)
				}
			}
		})
	}
	return l
}

func (l *load) finish() (sent, failed int64) {
	close(l.stop)
	l.wg.Wait()
	return l.sent.Load(), l.failed.Load()
}
