// Package healthcheck implements the healthcheck plugin: named TCP, HTTP and HTTPS checks run
// from several prober regions, and load-balancer groups whose virtual IP derives its health
// from its backends. Verdicts are written to the process-wide health board (plugin/pkg/health),
// which routingpolicy, pschealth and outbound read. The plugin answers no query. With a fleet
// block, replicas share the probing and the verdicts through etcd (fleet*.go, shard.go). The
// design and the rules its tests name (HC-1 to HC-7, H-1 to H-6, F-1 to F-4) are in
// docs/DESIGN.md of the repository.
package healthcheck

import (
	"sync/atomic"

	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// HealthCheck is one healthcheck block. It probes the targets that consumers of its checks want
// and the backends of its load balancers, and publishes the VIPs of its load balancers.
type HealthCheck struct {
	cfg    *config
	board  *health.Board
	reg    *Registry
	demand *health.Demand
	group  *group // the blocks of the same Corefile instance
	gen    uint64 // the instance's lifecycle.Generation: the newest writes the VIPs

	cur atomic.Pointer[running] // set between OnStartup and OnShutdown
}

// Name is the plugin's name.
func (h *HealthCheck) Name() string { return "healthcheck" }
