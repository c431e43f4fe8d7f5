package outbound

import (
	"github.com/coredns/coredns/plugin"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	requestCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "outbound",
		Name:      "requests_total",
		Help:      "Counter of upstream attempts by endpoint, target and rcode (timeout and error for attempts without a reply).",
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
		Help:      "Current rank (1 = preferred) of each endpoint and target for queries from the server's own region.",
	}, []string{"zone", "region", "endpoint", "target"})

	upGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "outbound",
		Name:      "up",
		Help:      "1 when an endpoint reaches a target, 0 when it is down (success ratio below 0.5 or 2 failures in a row).",
	}, []string{"endpoint", "target"})

	failoverCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "outbound",
		Name:      "failovers_total",
		Help:      "Counter of queries answered by another endpoint or target after the first attempt failed.",
	}, []string{"server", "zone"})

	recoveryCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "outbound",
		Name:      "recoveries_total",
		Help:      "Counter of endpoint and target pairs that came back up after being down.",
	}, []string{"endpoint", "target"})

	allFailedCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "outbound",
		Name:      "all_failed_total",
		Help:      "Counter of queries answered SERVFAIL because every attempt failed.",
	}, []string{"server", "zone"})

	refusedCount = promauto.NewCounterVec(prometheus.CounterOpts{
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
	}, []string{"endpoint", "target", "result"})
)
