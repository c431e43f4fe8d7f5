package outbound

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin/metadata"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
)

// newHandler parses and binds an outbound block outside a server, for handler tests.
func newHandler(tb testing.TB, block string) *Outbound {
	tb.Helper()
	o, err := parse(caddy.NewTestController("dns", block))
	if err != nil {
		tb.Fatal(err)
	}
	reg := newRegistry()
	for _, e := range o.declared {
		if err := reg.declare(e); err != nil {
			tb.Fatal(err)
		}
	}
	if err := o.bind(reg); err != nil {
		tb.Fatal(err)
	}
	o.Next = test.ErrorHandler()
	tb.Cleanup(o.stop)
	return o
}

func TestMetadata(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	o := newHandler(t, "outbound example. {\nto "+r.addr+"\nprivate 127.0.0.0/8\nendpoint eu europe-west1 127.0.0.11\nendpoint us us-east1 127.0.0.12\nregion europe-west1\n}")
	ctx := metadata.ContextWithMetadata(context.Background())
	m := new(dns.Msg)
	m.SetQuestion("md.example.", dns.TypeA)
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	if _, err := o.ServeDNS(ctx, rec, m); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"outbound/endpoint": "eu",
		"outbound/source":   "127.0.0.11",
		"outbound/target":   r.addr,
		"outbound/rank":     "1",
	}
	for label, v := range want {
		f := metadata.ValueFunc(ctx, label)
		if f == nil || f() != v {
			got := "<unset>"
			if f != nil {
				got = f()
			}
			t.Errorf("metadata %s = %s, want %s", label, got, v)
		}
	}
}

// Bounded in-flight work: past max_concurrent, REFUSED (and the counter).
func TestMaxConcurrent(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	r.setDelay(300 * time.Millisecond)
	o := newHandler(t, "outbound example. {\nto "+r.addr+"\nprivate 127.0.0.0/8\nmax_concurrent 1\n}")
	var wg sync.WaitGroup
	wg.Go(func() {
		m := new(dns.Msg)
		m.SetQuestion("slow.example.", dns.TypeA)
		o.ServeDNS(context.Background(), dnstest.NewRecorder(&test.ResponseWriter{}), m)
	})
	deadline := time.Now().Add(5 * time.Second)
	for r.queries.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("first query never reached the resolver")
		}
		time.Sleep(time.Millisecond)
	}
	m := new(dns.Msg)
	m.SetQuestion("second.example.", dns.TypeA)
	rc, err := o.ServeDNS(context.Background(), dnstest.NewRecorder(&test.ResponseWriter{}), m)
	if rc != dns.RcodeRefused || err != errLimit {
		t.Errorf("past max_concurrent: rcode %d err %v, want REFUSED", rc, err)
	}
	wg.Wait()
}

// except: sub-zones not forwarded go to the next plugin.
func TestExcept(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	o := newHandler(t, "outbound example. {\nto "+r.addr+"\nprivate 127.0.0.0/8\nexcept skip.example\n}")
	m := new(dns.Msg)
	m.SetQuestion("a.skip.example.", dns.TypeA)
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	o.ServeDNS(context.Background(), rec, m)
	if r.queries.Load() != 0 {
		t.Errorf("excepted name was forwarded")
	}
}

func serve(t *testing.T, o *Outbound, m *dns.Msg) *dns.Msg {
	t.Helper()
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	if _, err := o.ServeDNS(context.Background(), rec, m); err != nil {
		t.Fatal(err)
	}
	return rec.Msg
}

// serveAny serves m through o and returns the reply, whatever error the handler returns.
func serveAny(o *Outbound, m *dns.Msg) *dns.Msg {
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	o.ServeDNS(context.Background(), rec, m)
	return rec.Msg
}

func TestMatch(t *testing.T) {
	o := &Outbound{zones: []string{"example.", "a.example.", "corp."}, except: []string{"skip.a.example."}}
	for _, tc := range []struct{ name, want string }{
		{"example.", "example."},
		{"x.EXAMPLE.", "example."},
		{"b.a.example.", "a.example."},
		{"A.example.", "a.example."},
		{"ba.example.", "example."},
		{"x.skip.a.example.", ""},
		{"skip.a.example.", ""},
		{"noexample.", ""},
		{"org.", ""},
		{"x.corp.", "corp."},
	} {
		if got := o.match(tc.name); got != tc.want {
			t.Errorf("match(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
	root := &Outbound{zones: []string{"."}}
	if root.match("anything.example.") != "." {
		t.Errorf("root zone does not match")
	}
}

// routingpolicy asks the outbound handler of its server block which names it forwards.
func TestZonesAndForwards(t *testing.T) {
	o := &Outbound{zones: []string{"corp.internal."}, except: []string{"geo.corp.internal."}}
	if z := o.Zones(); len(z) != 1 || z[0] != "corp.internal." {
		t.Errorf("Zones() = %v", z)
	}
	if !o.Forwards("a.corp.internal") || o.Forwards("resolvers.geo.corp.internal.") || o.Forwards("example.org.") {
		t.Errorf("Forwards is wrong")
	}
}

// Sockets closed by this instance's shutdown are not a path failure: ranking state, which
// outlives the instance, is not touched.
func TestClosedTransportNotRecorded(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	o := newHandler(t, "outbound example. {\nto "+r.addr+"\nprivate 127.0.0.0/8\n}")
	p := o.rk.pairs[0]
	p.up.close()
	m := new(dns.Msg)
	m.SetQuestion("closed.example.", dns.TypeA)
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	o.ServeDNS(context.Background(), rec, m)
	if rec.Msg == nil || rec.Msg.Rcode != dns.RcodeServerFailure {
		t.Fatalf("closed transport: %v", rec.Msg)
	}
	if _, _, _, consec, _ := p.stats(time.Now()); consec != 0 {
		t.Errorf("a closed socket pool was recorded as %d path failures", consec)
	}
}
