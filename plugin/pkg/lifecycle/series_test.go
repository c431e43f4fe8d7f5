package lifecycle

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

func count(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	return len(ch)
}

// H-6: a series lives while an instance holds what it describes, across a reload's overlap, and
// is deleted with the last release; it cannot be made again once released.
func TestSeriesH6(t *testing.T) {
	vec := promauto.With(nil).NewGaugeVec(prometheus.GaugeOpts{Name: "test_gauge"}, []string{"zone", "name", "item"})
	s := NewSeries([]string{"zone", "name"}, vec.MetricVec)

	s.Hold("z.", "www") // the running instance
	vec.WithLabelValues("z.", "www", "0").Set(1)
	vec.WithLabelValues("z.", "www", "1").Set(1)
	vec.WithLabelValues("z.", "api", "0").Set(1)
	s.Hold("z.", "www", "ignored") // a reload's new instance
	s.Release("z.", "www")         // the old one stops
	if n := count(vec); n != 3 {
		t.Fatalf("%d series after the old instance's release, want 3", n)
	}
	s.Release("z.", "www")
	if n := count(vec); n != 1 {
		t.Fatalf("%d series after the last release, want 1 (z./api)", n)
	}
	if s.Use(func() { vec.WithLabelValues("z.", "www", "0").Set(1) }, "z.", "www", "0") {
		t.Fatal("Use ran for a released series")
	}
	if n := count(vec); n != 1 {
		t.Fatalf("%d series: a released series came back", n)
	}
	s.Hold("z.", "api")
	if !s.Use(func() {}, "z.", "api") {
		t.Fatal("Use did not run for a held series")
	}
	s.Release("z.", "api")
	if n := count(vec); n != 0 {
		t.Fatalf("%d series left", n)
	}
}
