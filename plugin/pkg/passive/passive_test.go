package passive

import (
	"context"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
)

type readiness interface{ Ready() bool }

// TestAddRegistersWithoutAStep: the handler Add puts in the chain is found by its name and asks
// the plugin's Ready, and a query goes to the next plugin as if it were not there.
func TestAddRegistersWithoutAStep(t *testing.T) {
	c := caddy.NewTestController("dns", "")
	ready := false
	Add(c, "healthcheck", func() bool { return ready })
	conf := dnsserver.GetConfig(c)
	if len(conf.Plugin) != 1 {
		t.Fatalf("Add added %d plugin functions, want 1", len(conf.Plugin))
	}
	var got *dns.Msg
	next := plugin.HandlerFunc(func(_ context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
		got = r
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeNameError)
		return dns.RcodeNameError, w.WriteMsg(m)
	})
	h := conf.Plugin[0](next)
	if h.Name() != "healthcheck" {
		t.Errorf("Name() = %q, want healthcheck", h.Name())
	}
	r, ok := h.(readiness)
	if !ok {
		t.Fatal("the handler does not implement Ready: the ready plugin would not find the plugin")
	}
	if r.Ready() {
		t.Error("Ready() = true while the plugin says false")
	}
	ready = true
	if !r.Ready() {
		t.Error("Ready() = false while the plugin says true")
	}

	q := new(dns.Msg)
	q.SetQuestion("example.org.", dns.TypeA)
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	rcode, err := h.ServeDNS(context.Background(), rec, q)
	if err != nil || rcode != dns.RcodeNameError || got != q || rec.Msg == nil || rec.Msg.Rcode != dns.RcodeNameError {
		t.Errorf("query through the handler: rcode %d, err %v, next saw the query %v: want next's NXDOMAIN", rcode, err, got == q)
	}
}

// TestLastFailsLikeNextOrFailure: with nothing after it, the query fails with SERVFAIL and an
// error, as a plugin calling plugin.NextOrFailure with no next fails it.
func TestLastFailsLikeNextOrFailure(t *testing.T) {
	h := New("pschealth", func() bool { return true }, nil)
	if h.Name() != "pschealth" || !h.(readiness).Ready() {
		t.Errorf("Name %q, Ready %v: want pschealth, true", h.Name(), h.(readiness).Ready())
	}
	q := new(dns.Msg)
	q.SetQuestion("example.org.", dns.TypeA)
	rcode, err := h.ServeDNS(context.Background(), dnstest.NewRecorder(&test.ResponseWriter{}), q)
	if rcode != dns.RcodeServerFailure || err == nil {
		t.Errorf("rcode %d, err %v: want SERVFAIL and an error", rcode, err)
	}
}
