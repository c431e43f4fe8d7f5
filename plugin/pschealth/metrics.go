package pschealth

import (
	"slices"

	"github.com/coredns/coredns/plugin"
	"github.com/coresteer/coresteer/plugin/pkg/lifecycle"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// P-6: composite and source state are visible in metrics, in dry_run too.
var (
	compositeState = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "pschealth",
		Name:      "composite_state",
		Help:      "State of each composite: 1 on the series of its current state (healthy, unhealthy, unknown), 0 on the others.",
	}, []string{"composite", "destination", "state"})

	compositePublished = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "pschealth",
		Name:      "composite_published",
		Help:      "Whether the composite state is published under its destination (0 in dry_run, or when another writer owns the address).",
	}, []string{"composite", "destination"})

	compositeChanges = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "pschealth",
		Name:      "composite_changes_total",
		Help:      "Counter of composite state changes, by the state changed to.",
	}, []string{"composite", "state"})

	sourceState = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "pschealth",
		Name:      "source_state",
		Help:      "State of each health source under its policy: 1 on the series of its current state, 0 on the others.",
	}, []string{"source", "state"})

	sourceBackends = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "pschealth",
		Name:      "source_backends",
		Help:      "Number of backends of each health source, by backend state (healthy, unhealthy, unknown).",
	}, []string{"source", "state"})

	sourceMinHealthy = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "pschealth",
		Name:      "source_min_healthy",
		Help:      "Minimum number of healthy backends the policy of each source requires.",
	}, []string{"source"})

	sourceMinHealthyPercent = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "pschealth",
		Name:      "source_min_healthy_percent",
		Help:      "Minimum percentage of healthy backends the policy of each source requires.",
	}, []string{"source"})
)

var states = []string{"healthy", "unhealthy", "unknown"}

// The series of a composite and of a source are held by the instances that configure them and
// deleted with the last (H-6): a composite whose destination changes loses the series under the
// old one.
var (
	compositeSeries = lifecycle.NewSeries([]string{"composite", "destination"}, compositeState.MetricVec, compositePublished.MetricVec)
	compositeNames  = lifecycle.NewSeries([]string{"composite"}, compositeChanges.MetricVec)
	sourceSeries    = lifecycle.NewSeries([]string{"source"}, sourceState.MetricVec, sourceBackends.MetricVec, sourceMinHealthy.MetricVec, sourceMinHealthyPercent.MetricVec)
)

// stateGauges are the per-state series of one source or composite, resolved once.
type stateGauges [3]prometheus.Gauge

func newStateGauges(vec *prometheus.GaugeVec, labels ...string) stateGauges {
	var g stateGauges
	for i, s := range states {
		g[i] = vec.WithLabelValues(append(slices.Clip(labels), s)...)
	}
	return g
}

// set puts 1 on the series of s and 0 on the others.
func (g stateGauges) set(s string) {
	for i, name := range states {
		if name == s {
			g[i].Set(1)
		} else {
			g[i].Set(0)
		}
	}
}
