package outbound

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// gather returns the series of the metrics whose name keep accepts and whose labels contain all
// of match.
func gather(t *testing.T, keep func(name string) bool, match map[string]string) []*dto.Metric {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []*dto.Metric
	for _, mf := range mfs {
		if !keep(mf.GetName()) {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range match {
				if labels[k] != v {
					continue series
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// seriesCount counts the series of every outbound metric whose labels contain all of match.
func seriesCount(t *testing.T, match map[string]string) int {
	t.Helper()
	return len(gather(t, func(n string) bool { return strings.HasPrefix(n, "coredns_outbound_") }, match))
}

// The metrics of the README move: attempts by rcode (timeouts included), latency of every
// attempt, failovers, all-failed, refused past max_concurrent, probes, up/down and rank.
func TestMetrics(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	zone := map[string]string{"zone": "metrics.example."}
	o := newHandler(t, "outbound metrics.example. {\nto "+r.addr+"\nprivate 127.0.0.0/8\nendpoint m-eu europe-west1 127.0.0.11\nendpoint m-us us-east1 127.0.0.12\nregion europe-west1\ntimeout 1s\n}")
	q := func(name string) {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		o.ServeDNS(context.Background(), dnstest.NewRecorder(&test.ResponseWriter{}), m)
	}
	base := func(name string, l map[string]string) float64 { return coretest.Sum(t, name, l) }
	noerr0 := base("coredns_outbound_requests_total", map[string]string{"zone": "metrics.example.", "endpoint": "m-eu", "rcode": "NOERROR"})
	q("a.metrics.example.")
	if d := base("coredns_outbound_requests_total", map[string]string{"zone": "metrics.example.", "endpoint": "m-eu", "rcode": "NOERROR"}) - noerr0; d != 1 {
		t.Errorf("requests_total NOERROR moved by %v", d)
	}
	// eu's path goes silent: a timeout, then a failover to us.
	to0 := base("coredns_outbound_requests_total", map[string]string{"endpoint": "m-eu", "rcode": "timeout"})
	fo0 := base("coredns_outbound_failovers_total", zone)
	lat0 := base("coredns_outbound_request_duration_seconds", map[string]string{"endpoint": "m-eu"})
	r.drop(netip.MustParseAddr("127.0.0.11"))
	q("b.metrics.example.")
	if d := base("coredns_outbound_requests_total", map[string]string{"endpoint": "m-eu", "rcode": "timeout"}) - to0; d != 1 {
		t.Errorf("requests_total timeout moved by %v", d)
	}
	if d := base("coredns_outbound_failovers_total", zone) - fo0; d != 1 {
		t.Errorf("failovers_total moved by %v", d)
	}
	if d := base("coredns_outbound_request_duration_seconds", map[string]string{"endpoint": "m-eu"}) - lat0; d != 1 {
		t.Errorf("request_duration_seconds did not observe the failed attempt (%v)", d)
	}
	// No resolver answers.
	af0 := base("coredns_outbound_all_failed_total", zone)
	r.setMode(modeSilent)
	q("c.metrics.example.")
	if d := base("coredns_outbound_all_failed_total", zone) - af0; d != 1 {
		t.Errorf("all_failed_total moved by %v", d)
	}
	// Probes, up/down and rank after an exploration round.
	r.setMode(modeAnswer)
	p0 := base("coredns_outbound_probes_total", map[string]string{"endpoint": "m-eu"})
	exploreRound(o)
	if d := base("coredns_outbound_probes_total", map[string]string{"endpoint": "m-eu"}) - p0; d < 1 {
		t.Errorf("probes_total did not move")
	}
	if v := base("coredns_outbound_up", map[string]string{"endpoint": "m-eu"}); v != 0 {
		t.Errorf("up{m-eu} = %v, want 0 while its path is silent", v)
	}
	if v := base("coredns_outbound_rank", map[string]string{"endpoint": "m-us", "zone": "metrics.example."}); v != 1 {
		t.Errorf("rank{m-us} = %v, want 1", v)
	}
}

// Ready after startup, not before, not after shutdown.
func TestReady(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	o := newHandler(t, "outbound example. {\nto "+r.addr+"\nprivate 127.0.0.0/8\n}")
	if o.Ready() {
		t.Error("ready before startup")
	}
	if err := o.start(); err != nil {
		t.Fatal(err)
	}
	if !o.Ready() {
		t.Error("not ready after startup")
	}
	o.stop()
	if o.Ready() {
		t.Error("ready after shutdown")
	}
}

// O-4 across server blocks: an 11th endpoint in one region, declared in another block of the same
// Corefile, is refused.
func TestRegionLimitAcrossBlocks(t *testing.T) {
	var a, b strings.Builder
	for i := range 6 {
		fmt.Fprintf(&a, "endpoint a%d europe-west1 127.0.0.11\n", i)
		fmt.Fprintf(&b, "endpoint b%d europe-west1 127.0.0.12\n", i)
	}
	_, err := coretest.New(`a.example.:0 {
	bind 127.0.0.1
	outbound {
		to 10.0.0.53
		` + a.String() + `
	}
}
b.example.:0 {
	bind 127.0.0.1
	outbound {
		to 10.0.0.53
		` + b.String() + `
	}
}`)
	if err == nil || !strings.Contains(err.Error(), "region europe-west1 already has 10 endpoints") {
		t.Errorf("O-4 across blocks: %v", err)
	}
}
