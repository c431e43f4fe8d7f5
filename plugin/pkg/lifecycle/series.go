package lifecycle

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Series holds metric series on behalf of the instances that describe them: a record set, a
// target, a composite. During a reload the new instance holds what the old one holds before the
// old one gives it back, so a series lives on while anyone holds it and is deleted with the
// last Release. Hold at startup (or when a file reload brings the thing in), Release from the
// stop given to Hook (or when a file reload drops it): every series then belongs to the live
// configuration (H-6).
type Series struct {
	labels []string // the labels that name what is described, a prefix of the values given
	vecs   []*prometheus.MetricVec

	mu   sync.Mutex
	refs map[string]int
}

// NewSeries returns a Series over vecs, whose series are named by labels: Release deletes every
// series of vecs whose labels have the released values.
func NewSeries(labels []string, vecs ...*prometheus.MetricVec) *Series {
	return &Series{labels: labels, vecs: vecs, refs: make(map[string]int)}
}

func (s *Series) key(values []string) string { return strings.Join(values[:len(s.labels)], "\x00") }

// Hold takes a reference on the series named by values (one per label of NewSeries; more are
// ignored).
func (s *Series) Hold(values ...string) {
	s.mu.Lock()
	s.refs[s.key(values)]++
	s.mu.Unlock()
}

// Release gives back a reference taken by Hold; the last one deletes the series.
func (s *Series) Release(values ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.key(values)
	if s.refs[k]--; s.refs[k] > 0 {
		return
	}
	delete(s.refs, k)
	l := make(prometheus.Labels, len(s.labels))
	for i, name := range s.labels {
		l[name] = values[i]
	}
	for _, v := range s.vecs {
		v.DeletePartialMatch(l)
	}
}

// Use runs create, which makes a series named by values, only while they are held, and reports
// whether it ran. A query in flight on data that a reload has just dropped then cannot bring back
// a series that Release deleted.
func (s *Series) Use(create func(), values ...string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refs[s.key(values)] == 0 {
		return false
	}
	create()
	return true
}
