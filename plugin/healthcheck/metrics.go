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

// The fleet metrics (docs/DESIGN.md section 8) are labelled with the replica name; they exist
// while a fleet block of the live configuration names that replica.
var (
	// fleetMembers is the number of live members of the fleet this replica sees.
	fleetMembers = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "healthcheck",
		Name:      "fleet_members",
		Help:      "Live members of the health-check fleet seen by this replica.",
	}, []string{"replica"})

	// fleetTargets is the number of (check, target) pairs this replica probes from at least one
	// region: every target in fallback, its share when the fleet decides.
	fleetTargets = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "healthcheck",
		Name:      "fleet_targets_probed",
		Help:      "Health-checked targets this fleet replica probes itself.",
	}, []string{"replica"})

	// fleetPublished counts the results this replica wrote to etcd (a put or a delete each).
	fleetPublished = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "healthcheck",
		Name:      "fleet_results_published_total",
		Help:      "Counter of probe results this fleet replica wrote to etcd (puts and deletes).",
	}, []string{"replica"})

	// fleetReceived counts the results of other replicas read from etcd: listed at a (re)join, and
	// the changes the watch brings after.
	fleetReceived = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "healthcheck",
		Name:      "fleet_results_received_total",
		Help:      "Counter of probe results of other fleet replicas read from etcd (listed at a join, then through the watch).",
	}, []string{"replica"})

	// fleetErrors counts failed etcd requests.
	fleetErrors = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "healthcheck",
		Name:      "fleet_etcd_errors_total",
		Help:      "Counter of failed etcd requests of the health-check fleet.",
	}, []string{"replica"})

	// fleetFallback is 1 while the replica probes and decides alone (F-4), 0 while the fleet decides.
	fleetFallback = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "healthcheck",
		Name:      "fleet_fallback",
		Help:      "1 while this fleet replica probes and decides alone (etcd unreachable or not joined yet), 0 while the fleet decides.",
	}, []string{"replica"})

	fleetSeries = lifecycle.NewSeries([]string{"replica"}, fleetMembers.MetricVec, fleetTargets.MetricVec,
		fleetPublished.MetricVec, fleetReceived.MetricVec, fleetErrors.MetricVec, fleetFallback.MetricVec)
)

// The series of a check, of a check's prober region and of a VIP are held by the instances that
// configure them and deleted with the last (H-6); the registry deletes the target_state series of
// a probe when it stops.
var (
	checkSeries  = lifecycle.NewSeries([]string{"check"}, transitions.MetricVec)
	regionSeries = lifecycle.NewSeries([]string{"check", "region"}, probesTotal.MetricVec, probeDuration.MetricVec)
	vipSeries    = lifecycle.NewSeries([]string{"check", "target"}, targetState.MetricVec)
)
