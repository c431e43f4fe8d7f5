package outbound

import (
	"net"
	"strconv"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coresteer/coresteer/plugin/pkg/lifecycle"

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
)

// The series of every metric, held through plugin/pkg/lifecycle (H-6): by the block, for its zones
// and endpoints, and by each ranker, for its zones, endpoints, pairs and their rank. A reload
// starts the new instance before the old one stops, zones and endpoints may be shared between
// blocks, and a query in flight holds its ranker: a series is deleted when the last user of what it
// describes lets go, never before, and not made again after.
var (
	zoneSeries     = lifecycle.NewSeries([]string{"server", "zone"}, allVecs()...)
	endpointSeries = lifecycle.NewSeries([]string{"server", "zone", "endpoint"}, allVecs()...)
	pairSeries     = lifecycle.NewSeries([]string{"server", "zone", "endpoint", "target"}, allVecs()...)
	rankSeries     = lifecycle.NewSeries([]string{"server", "zone", "region", "endpoint", "target"}, rankGauge.MetricVec)
)

func allVecs() []*prometheus.MetricVec {
	return []*prometheus.MetricVec{requestCount.MetricVec, requestDuration.MetricVec, rankGauge.MetricVec, upGauge.MetricVec,
		failoverCount.MetricVec, recoveryCount.MetricVec, allFailedCount.MetricVec, rejectCount.MetricVec, probeCount.MetricVec}
}

// held is a series held: Series and the values that name it.
type held struct {
	s *lifecycle.Series
	v []string
}

func holdAll(hs []held) {
	for _, h := range hs {
		h.s.Hold(h.v...)
	}
}

func releaseAll(hs []held) {
	for _, h := range hs {
		h.s.Release(h.v...)
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
	rks := o.rankers()
	defer releaseRankers(rks)
	for _, rk := range rks {
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
