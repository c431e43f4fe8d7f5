package coretest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Series returns the label sets of the series of metric name in the process's Prometheus
// registry, which the plugins' promauto metrics and the prometheus plugin share.
func Series(tb testing.TB, name string) []map[string]string {
	tb.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var out []map[string]string
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := make(map[string]string, len(m.GetLabel()))
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			out = append(out, l)
		}
	}
	return out
}
