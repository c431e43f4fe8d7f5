package status

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/coresteer/coresteer/plugin/healthcheck"
	_ "github.com/coresteer/coresteer/plugin/outbound"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	_ "github.com/coresteer/coresteer/plugin/pschealth"
	_ "github.com/coresteer/coresteer/plugin/routingpolicy"

	"github.com/miekg/dns"
)

// backend is a real HTTP server on one loopback address whose answers can be failed.
type backend struct {
	ok atomic.Bool
}

// startBackends starts a healthy web backend on each address, all on one port (the check's),
// and returns the port. The port is free on every address, so tests running at once do not
// collide.
func startBackends(tb testing.TB, addrs ...string) (string, map[string]*backend) {
	tb.Helper()
	for range 20 {
		first, err := net.Listen("tcp", addrs[0]+":0")
		if err != nil {
			tb.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(first.Addr().String())
		lns := []net.Listener{first}
		for _, a := range addrs[1:] {
			ln, err := net.Listen("tcp", net.JoinHostPort(a, port))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		if len(lns) < len(addrs) {
			for _, ln := range lns {
				ln.Close()
			}
			continue
		}
		out := map[string]*backend{}
		for i, ln := range lns {
			b := &backend{}
			b.ok.Store(true)
			srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if !b.ok.Load() {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				fmt.Fprintln(w, "ok")
			})}
			go func() { _ = srv.Serve(ln) }()
			tb.Cleanup(func() { _ = srv.Close() })
			out[addrs[i]] = b
		}
		return port, out
	}
	tb.Fatal("no port free on every backend address")
	return "", nil
}

// get fetches url and returns the status code and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// getJSON fetches url and decodes its JSON body into v, failing on anything but 200.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	code, body := get(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v\n%s", url, err, body)
	}
}

// waitFor polls cond with a deadline; it does not depend on the machine's speed.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// resolver is a DNS server on a loopback address that answers every A query.
func startResolver(tb testing.TB, ip string) string {
	tb.Helper()
	pc, err := net.ListenPacket("udp", ip+":0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if len(r.Question) == 1 && r.Question[0].Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30},
				A: net.ParseIP("10.0.0.1")})
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	tb.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

// fullCorefile is a server with every plugin and status on statusAddr. Its web backends are
// 127.0.77.{1,2,3,4}:port.
func fullCorefile(statusAddr, port, resolver, extra string) string {
	return strings.NewReplacer("STATUS", statusAddr, "PORT", port, "RESOLVER", resolver, "EXTRA", extra).Replace(`.:0 {
	bind 127.0.0.1
	status STATUS
	healthcheck {
		check web {
			protocol http
			port PORT
			path /
			interval 1s
			timeout 500ms
			healthy_threshold 1
			unhealthy_threshold 1
			prober us-east1 127.0.0.1
			prober europe-west1 127.0.0.2
		}
		loadbalancer 127.0.77.100 {
			backends 127.0.77.3 127.0.77.4
			check web
		}
	}
	pschealth {
		policy half min_healthy_percent 50 min_healthy 1
		source svc {
			backends 127.0.77.3 127.0.77.4
			check web
			policy half
		}
		composite shop {
			sources svc
			destination 127.0.77.200
		}
	}
	routingpolicy example.org {
		region us-east1
		subnet europe-west1 127.0.2.0/24
		wrr www A 60 "70=127.0.77.1;30=127.0.77.2" healthcheck web
		geo app A 60 "us-east1=127.0.77.1;europe-west1=127.0.77.2" healthcheck web
		failover shop A 60 "127.0.77.200" "europe-west1=127.0.77.2" trickle 0.1
		EXTRA
	}
	outbound corp.internal {
		to RESOLVER
		private 127.0.0.0/8
		endpoint egress-us us-east1 127.0.0.11
		endpoint egress-eu europe-west1 127.0.0.12
		region us-east1
		subnet europe-west1 127.0.2.0/24
	}
}`)
}

// startFull starts fullCorefile and returns the server, the status page's base URL and the
// backends.
func startFull(tb testing.TB) (*coretest.Server, string, map[string]*backend) {
	tb.Helper()
	port, bs := startBackends(tb, "127.0.77.1", "127.0.77.2", "127.0.77.3", "127.0.77.4")
	statusAddr := "127.0.0.1:" + coretest.FreePort(tb)
	s := coretest.Start(tb, fullCorefile(statusAddr, port, startResolver(tb, "127.0.0.61"), ""))
	base := "http://" + statusAddr
	waitFor(tb, "the status page", func() bool {
		resp, err := http.Get(base + "/status.json")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})
	return s, base, bs
}
