package udpbatch

import (
	"github.com/coredns/coredns/plugin"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	// writesTotal counts UDP answers by how they left: queued and sent with sendmmsg (queued),
	// written by their handler because the queue was full (overflow), or written by their handler
	// because they cannot be batched (direct: not a plain UDP listener, or after shutdown).
	writesTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "udpbatch",
		Name:      "writes_total",
		Help:      "Counter of UDP answers by path: queued (sent in a batch), overflow (queue full) or direct (not batchable).",
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
