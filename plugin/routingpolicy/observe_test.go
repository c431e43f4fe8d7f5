package routingpolicy

import (
	"context"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/metadata"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// value reads a counter or gauge.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.GetCounter() != nil {
		return d.GetCounter().GetValue()
	}
	return d.GetGauge().GetValue()
}

func TestMetadata(t *testing.T) {
	rp, _ := newTest(t, `routingpolicy example.org {`+geoLoc+`
		geo www A 60 "us-east1=10.0.1.1;europe-west2=10.0.2.1"
	}`)
	// The metadata plugin makes the context; routingpolicy sets its values when a policy answers.
	md := metadata.Metadata{Zones: []string{"."}}
	ctx := md.Collect(context.Background(), newRequest("www.example.org."))
	m := new(dns.Msg)
	m.SetQuestion("www.example.org.", dns.TypeA)
	rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: "10.2.1.1"})
	if _, err := rp.ServeDNS(ctx, rec, m); err != nil {
		t.Fatal(err)
	}
	for label, want := range map[string]string{
		"routingpolicy/policy": "geo",
		"routingpolicy/item":   "europe-west2",
		"routingpolicy/region": "europe-west1",
	} {
		f := metadata.ValueFunc(ctx, label)
		if f == nil || f() != want {
			got := ""
			if f != nil {
				got = f()
			}
			t.Errorf("%s = %q, want %q", label, got, want)
		}
	}
}

func TestMetricsServedShare(t *testing.T) {
	rp, b := newTest(t, `routingpolicy metrics.test {
		wrr www A 60 "1=10.0.0.1;3=10.0.0.2" healthcheck web
		geo g A 60 "us-east1=10.0.1.1;europe-west2=10.0.2.1" healthcheck web
	}`)
	if got := value(t, wrrConfiguredShare.WithLabelValues("metrics.test.", "www.metrics.test./A", "1")); got != 0.75 {
		t.Fatalf("configured share of item 1: %v", got)
	}
	// Counters are process-wide: compare before and after.
	c0 := answersTotal.WithLabelValues("", "metrics.test.", "www.metrics.test./A", "0", "wrr")
	c1 := answersTotal.WithLabelValues("", "metrics.test.", "www.metrics.test./A", "1", "wrr")
	b0, b1 := value(t, c0), value(t, c1)
	fb := geoFallbacksTotal.WithLabelValues("", "metrics.test.", "g.metrics.test./A")
	fo := failOpenTotal.WithLabelValues("", "metrics.test.", "www.metrics.test./A")
	bfb, bfo := value(t, fb), value(t, fo)
	count(t, rp, "www.metrics.test.", "10.1.1.1", 4000)
	a0 := value(t, c0) - b0
	a1 := value(t, c1) - b1
	if a0+a1 != 4000 || a1 < 2700 || a1 > 3300 {
		t.Fatalf("served: item 0 %v, item 1 %v", a0, a1)
	}
	// Fail open and geo fallback are counted.
	set(b, "web", "10.0.1.1", health.Unhealthy)
	ask(t, rp, "g.metrics.test.", dns.TypeA, "10.1.1.1")
	if got := value(t, fb) - bfb; got != 1 {
		t.Fatalf("geo fallbacks: %v", got)
	}
	set(b, "web", "10.0.0.1", health.Unhealthy)
	set(b, "web", "10.0.0.2", health.Unhealthy)
	ask(t, rp, "www.metrics.test.", dns.TypeA, "10.1.1.1")
	if got := value(t, fo) - bfo; got != 1 {
		t.Fatalf("fail open: %v", got)
	}
}

func TestDNSSECRule(t *testing.T) {
	// R-SEC-1: with checks, one address per item and no mix of checked and unchecked addresses.
	rp, _ := newTest(t, `routingpolicy example.org {
		wrr www A 60 "1=10.0.0.1,10.0.0.2;1=10.0.0.3" healthcheck web
	}`)
	if err := rp.data.Load().checkDNSSEC(); err == nil || !strings.Contains(err.Error(), "one address per item") {
		t.Fatalf("two addresses in a checked item: %v", err)
	}
	rp, b := newTest(t, `routingpolicy example.org {
		wrr www A 60 "1=10.0.0.1;1=10.0.0.3"
	}`)
	d := rp.data.Load()
	if err := d.checkDNSSEC(); err != nil {
		t.Fatalf("no checks: %v", err)
	}
	// One address is a load-balancer VIP on the board: checked next to an unchecked one.
	set(b, "", "10.0.0.1", health.Healthy)
	if err := d.checkDNSSEC(); err == nil || !strings.Contains(err.Error(), "cannot mix checked and unchecked") {
		t.Fatalf("mixed: %v", err)
	}
	set(b, "", "10.0.0.3", health.Healthy)
	if err := d.checkDNSSEC(); err != nil {
		t.Fatalf("all VIPs, one per item: %v", err)
	}
}

func TestReady(t *testing.T) {
	rp, b := newTest(t, `routingpolicy example.org {
		wrr www A 60 "1=10.0.0.1" healthcheck web
	}`)
	if !rp.Ready() {
		t.Fatal("not ready while nothing publishes the target")
	}
	tg := b.Acquire(health.Key{Check: "web", Addr: mustAddr("10.0.0.1")})
	defer b.Release(tg)
	b.Publish(tg)
	defer b.Unpublish(tg)
	if rp.Ready() {
		t.Fatal("ready before the first verdict (H-2)")
	}
	b.Set(tg, health.Healthy, "probe")
	if !rp.Ready() {
		t.Fatal("not ready after the first verdict")
	}
}

func TestHealthLogging(t *testing.T) {
	// HC-7: with `log`, each policy answer logs the health of the checked addresses behind it.
	rp, b := newTest(t, `routingpolicy example.org {
		log
		wrr www A 60 "1=10.0.0.1;1=10.0.0.2" healthcheck web
	}`)
	set(b, "web", "10.0.0.2", health.Unhealthy)
	logs := coretest.CaptureLog(t)
	ask(t, rp, "www.example.org.", dns.TypeA, "10.1.1.1")
	out := logs.String()
	for _, want := range []string{"www.example.org./A wrr item=0", "web/10.0.0.1=unknown", "web/10.0.0.2=unhealthy"} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q lacks %q", out, want)
		}
	}
}
