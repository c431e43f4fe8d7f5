package routingpolicy

import (
	"sync/atomic"

	"github.com/coredns/coredns/plugin"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	// answersTotal counts answers per policy item, so the served split can be compared with the
	// configured one.
	answersTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "routingpolicy",
		Name:      "answers_total",
		Help:      "Counter of answers per record set and policy item.",
	}, []string{"server", "zone", "name", "policy", "item"})

	// failOpenTotal counts answers given with every item unhealthy (R-WRR-7, R-GEO-6, R-FO-4).
	failOpenTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "routingpolicy",
		Name:      "fail_open_total",
		Help:      "Counter of answers given as if everything were healthy because nothing was.",
	}, []string{"server", "zone", "name"})

	// geoFallbacksTotal counts geo answers from another location than the nearest (R-GEO-4).
	geoFallbacksTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "routingpolicy",
		Name:      "geo_fallbacks_total",
		Help:      "Counter of geo answers served from a farther location because the nearest was unhealthy.",
	}, []string{"server", "zone", "name"})

	// wrrConfiguredShare is the share of traffic each WRR item is configured to get.
	wrrConfiguredShare = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "routingpolicy",
		Name:      "wrr_configured_share",
		Help:      "Configured share (0..1) of each WRR item: weight over the sum of weights.",
	}, []string{"zone", "name", "item"})

	// reloadsTotal counts reloads of the zone and record set files by result.
	reloadsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "routingpolicy",
		Name:      "reloads_total",
		Help:      "Counter of file reloads by result (success or failure).",
	}, []string{"zone", "result"})
)

// cachedCounter is a counter resolved for one server label. The query path keeps it in an atomic
// pointer so it does not hash label values on every answer.
type cachedCounter struct {
	server string
	c      prometheus.Counter
}

// inc increments the counter of vec for labels, caching it in p for server.
func inc(p *atomic.Pointer[cachedCounter], vec *prometheus.CounterVec, server string, labels ...string) {
	if cc := p.Load(); cc != nil && cc.server == server {
		cc.c.Inc()
		return
	}
	cc := &cachedCounter{server: server, c: vec.WithLabelValues(append([]string{server}, labels...)...)}
	p.Store(cc)
	cc.c.Inc()
}
