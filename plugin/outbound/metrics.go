package outbound

import (
	"net"
	"strconv"
	"sync"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	requestCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "outbound",
		Name:      "requests_total",
		Help:      "Counter of upstream attempts by endpoint, target and rcode (timeout, error and cancelled for attempts without a reply).",
	}, []string{"server", "zone", "endpoint", "target", "rcode"})

	requestDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: plugin.Namespace,
		Subsystem: "outbound",
		Name:      "request_duration_seconds",
		Buckets:   plugin.TimeBuckets,
		Help:      "Histogram of the time each upstream attempt took, failures included.",
	}, []string{"server", "zone", "endpoint"})

	rankGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "outbound",
		Name:      "rank",
		Help:      "Current rank (1 = preferred) of each endpoint and target for queries from a region.",
	}, []string{"server", "zone", "region", "endpoint", "target"})

	upGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "outbound",
		Name:      "up",
		Help:      "1 when an endpoint reaches a target, 0 when it is down (success ratio below 0.5 or 2 failures in a row).",
	}, []string{"server", "zone", "endpoint", "target"})

	failoverCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "outbound",
		Name:      "failovers_total",
		Help:      "Counter of queries answered through another endpoint or target than the first one tried.",
	}, []string{"server", "zone"})

	recoveryCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "outbound",
		Name:      "recoveries_total",
		Help:      "Counter of endpoint and target pairs that came back up after being down.",
	}, []string{"server", "zone", "endpoint", "target"})

	allFailedCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "outbound",
		Name:      "all_failed_total",
		Help:      "Counter of queries answered SERVFAIL because no resolver answered.",
	}, []string{"server", "zone"})

	rejectCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "outbound",
		Name:      "max_concurrent_rejects_total",
		Help:      "Counter of queries refused because max_concurrent upstream queries were in flight.",
	}, []string{"server", "zone"})

	probeCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "outbound",
		Name:      "probes_total",
		Help:      "Counter of exploration probes sent through an endpoint to a target, by result.",
	}, []string{"server", "zone", "endpoint", "target", "result"})

	vecs = []interface{ DeletePartialMatch(prometheus.Labels) int }{
		requestCount, requestDuration, rankGauge, upGauge, failoverCount, recoveryCount, allFailedCount, rejectCount, probeCount,
	}
)

// seriesKey names the series of every metric whose labels include its non-empty ones: a zone,
// an endpoint of a zone, a pair of a zone, the rank of a pair for a region.
type seriesKey struct{ server, zone, region, endpoint, target string }

// series counts the users of each key. A reload starts the new instance before the old one
// stops, and zones and endpoints may be shared between blocks: series are deleted when the last
// user of what they describe lets go, never before.
var series = struct {
	sync.Mutex
	refs map[seriesKey]int
}{refs: map[seriesKey]int{}}

func retainSeries(k seriesKey) {
	series.Lock()
	series.refs[k]++
	series.Unlock()
}

func releaseSeries(k seriesKey) {
	series.Lock()
	defer series.Unlock()
	if series.refs[k]--; series.refs[k] > 0 {
		return
	}
	delete(series.refs, k)
	l := prometheus.Labels{"server": k.server, "zone": k.zone}
	for name, v := range map[string]string{"region": k.region, "endpoint": k.endpoint, "target": k.target} {
		if v != "" {
			l[name] = v
		}
	}
	for _, v := range vecs {
		v.DeletePartialMatch(l)
	}
}

// serverLabels returns the `server` label of each address the block listens on, as CoreDNS
// builds it (dnsserver's groupConfigsByListenAddr), or "" outside a server (handler tests).
func serverLabels(cfg *dnsserver.Config) []string {
	var out []string
	if cfg != nil {
		for _, h := range cfg.ListenHosts {
			if a, err := net.ResolveTCPAddr("tcp", net.JoinHostPort(h, cfg.Port)); err == nil {
				out = append(out, cfg.Transport+"://"+a.String())
			}
		}
	}
	if len(out) == 0 {
		out = append(out, "")
	}
	return out
}

// publish sets the rank and up gauges of this block's pairs under its first server label: rank
// for queries from the server's region, and for an FQDN target from every region it was resolved
// for. The rankers hold these series (startup.go).
func (o *Outbound) publish() {
	for _, rk := range o.rankers() {
		region := o.loc.Table.Name(rk.from)
		for pos, i := range rk.order(rk.from).order {
			p := rk.pairs[i]
			up := 1.0
			if p.isDown() {
				up = 0
			}
			for _, z := range o.zones {
				rankGauge.WithLabelValues(o.servers[0], z, region, p.ep.Name, p.dstStr).Set(float64(pos + 1))
				upGauge.WithLabelValues(o.servers[0], z, p.ep.Name, p.dstStr).Set(up)
			}
		}
	}
}

func rcodeString(rc int) string {
	if s, ok := dns.RcodeToString[rc]; ok {
		return s
	}
	return strconv.Itoa(rc)
}
