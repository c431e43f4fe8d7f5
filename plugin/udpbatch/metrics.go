package udpbatch

import (
	"github.com/coredns/coredns/plugin"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	// writesTotal counts UDP answers by how they left: at once by their handler on an idle socket
	// (direct), through the sender's sendmmsg (queued), or by their handler because the queue was
	// full (overflow).
	writesTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "udpbatch",
		Name:      "writes_total",
		Help:      "Counter of UDP answers by path: direct (idle socket), queued (sent in a batch) or overflow (queue full).",
	}, []string{"server", "path"})

	// batchSize is the number of answers each sendmmsg sent.
	batchSize = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: plugin.Namespace,
		Subsystem: "udpbatch",
		Name:      "batch_size",
		Help:      "Number of queued UDP answers sent per sendmmsg system call.",
		Buckets:   []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024},
	}, []string{"server"})

	// writeErrorsTotal counts queued answers that could not be sent.
	writeErrorsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "udpbatch",
		Name:      "write_errors_total",
		Help:      "Counter of queued UDP answers that could not be sent.",
	}, []string{"server"})
)
