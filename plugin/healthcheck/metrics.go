package healthcheck

import (
	"github.com/coredns/coredns/plugin"
	"github.com/coresteer/coresteer/plugin/pkg/lifecycle"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	// probesTotal counts probe attempts by check, prober region and result (healthy, unhealthy,
	// error for a prober that could not run, HC-3).
	probesTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "healthcheck",
		Name:      "probes_total",
		Help:      "Counter of health-check probe attempts by check, prober region and result.",
	}, []string{"check", "region", "result"})

	// probeDuration is the time a probe took, for probes that produced a result.
	probeDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: plugin.Namespace,
		Subsystem: "healthcheck",
		Name:      "probe_duration_seconds",
		Buckets:   []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		Help:      "Histogram of the time health-check probes took, by check and prober region.",
	}, []string{"check", "region"})

	// targetState is the state of every configured target: 0 unknown, 1 healthy, 2 unhealthy.
	// Load-balancer VIPs have an empty check label. Series of removed targets are deleted.
	targetState = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "healthcheck",
		Name:      "target_state",
		Help:      "State of each health-checked target and load-balancer VIP: 0 unknown, 1 healthy, 2 unhealthy.",
	}, []string{"check", "target"})

	// transitions counts state changes by check and new state.
	transitions = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "healthcheck",
		Name:      "state_transitions_total",
		Help:      "Counter of health state changes by check and new state; load-balancer VIPs have an empty check label.",
	}, []string{"check", "to"})
)

// The series of a check, of a check's prober region and of a VIP are held by the instances that
// configure them and deleted with the last (H-6); the registry deletes the target_state series of
// a probe when it stops.
var (
	checkSeries  = lifecycle.NewSeries([]string{"check"}, transitions.MetricVec)
	regionSeries = lifecycle.NewSeries([]string{"check", "region"}, probesTotal.MetricVec, probeDuration.MetricVec)
	vipSeries    = lifecycle.NewSeries([]string{"check", "target"}, targetState.MetricVec)
)
