package routingpolicy

import (
	"sync/atomic"

	"github.com/coredns/coredns/plugin"
	"github.com/coresteer/coresteer/plugin/pkg/lifecycle"

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
	}, []string{"server", "zone", "name", "item", "policy"})

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

// Every series describes something the live configuration names (H-6): a record set, one of its
// items, a zone. The data a block serves holds them (declare), from its startup or the file reload
// that brought it in, until its shutdown or the file reload that dropped it (withdraw); the last
// holder deletes them. During a reload both instances hold what they share.
var (
	itemSeries = lifecycle.NewSeries([]string{"zone", "name", "item"}, answersTotal.MetricVec, wrrConfiguredShare.MetricVec)
	setSeries  = lifecycle.NewSeries([]string{"zone", "name"}, failOpenTotal.MetricVec, geoFallbacksTotal.MetricVec)
	zoneSeries = lifecycle.NewSeries([]string{"zone"}, reloadsTotal.MetricVec)
	// shareWriters orders the data that set the configured shares of one record set: the newest
	// sets them, so a failed reload's data does not leave its weights behind.
	shareWriters = lifecycle.NewWriters()
)

// cachedCounter is a counter resolved for one server label. The query path keeps it in an atomic
// pointer so it does not hash label values on every answer.
type cachedCounter struct {
	server string
	c      prometheus.Counter
}

// inc increments the counter of vec for labels, caching it in p for server. labels start with
// the values that name the series in held: a series that a reload deleted is not made again by a
// query still in flight on the dropped data.
func inc(p *atomic.Pointer[cachedCounter], held *lifecycle.Series, vec *prometheus.CounterVec, server string, labels ...string) {
	if cc := p.Load(); cc != nil && cc.server == server {
		cc.c.Inc()
		return
	}
	lv := append([]string{server}, labels...)
	held.Use(func() {
		cc := &cachedCounter{server: server, c: vec.WithLabelValues(lv...)}
		p.Store(cc)
		cc.c.Inc()
	}, lv[1:]...)
}

// setShares publishes the configured share of each WRR item (R-WRR-2, R-WRR-3).
func (p *policy) setShares() {
	var total float64
	for _, it := range p.items {
		total += it.weight
	}
	for _, it := range p.items {
		share := 1 / float64(len(p.items))
		if total > 0 {
			share = it.weight / total
		}
		wrrConfiguredShare.WithLabelValues(p.zone, p.label, it.label).Set(share)
	}
}
