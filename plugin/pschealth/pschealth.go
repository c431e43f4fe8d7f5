// Package pschealth implements composite service health for cross-region failover: aggregation
// policies over the backends of a service (P-1), health sources (P-2), composite checks (P-3)
// whose state is published on the health board under a destination address (P-4), where
// routingpolicy and outbound see it like any health-checked address.
//
// pschealth answers no query: its handler (plugin/pkg/passive) is the next plugin's. It reads
// the state of the backends that healthcheck probes, recomputes when the board tells it
// something changed, and writes the composite state under the destination. The design and the rules its tests name (P-1
// to P-6, H-1 to H-6) are in docs/DESIGN.md of the repository.
package pschealth

import (
	"sync"
	"sync/atomic"
	"time"

	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/coresteer/coresteer/plugin/pkg/health"
)

var log = clog.NewWithPlugin(pluginName)

// PSCHealth computes and publishes the composite checks of one pschealth configuration.
type PSCHealth struct {
	cfg    *Config
	board  *health.Board
	memory *health.Board  // dry-run states, kept across reloads like the real ones
	demand *health.Demand // the Corefile instance's: the backends are wanted probed through it
	gen    uint64         // the instance's lifecycle.Generation: the newest writes

	mu      sync.Mutex // guards the lifecycle fields below
	running bool
	srcs    []*sourceRun
	comps   []*compositeRun
	watched map[health.Key]bool
	cancel  func()
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}

	ready atomic.Bool
	// seen counts the backend changes notified, evaluated the count the last evaluation had
	// seen when it started: evaluated >= seen means every change so far is reflected.
	seen, evaluated atomic.Int64
}

// New returns a PSCHealth for cfg that reads and writes board. Nothing runs before OnStartup.
func New(cfg *Config, board *health.Board) *PSCHealth {
	return &PSCHealth{cfg: cfg, board: board, memory: memoryOf(board), demand: health.NewDemand()}
}

// Name is the plugin's name.
func (p *PSCHealth) Name() string { return pluginName }

// memories holds, per board, the board of dry-run composite states, so a reload does not
// forget (and log again) what a dry run had computed (H-4).
var memories = struct {
	sync.Mutex
	m map[*health.Board]*health.Board
}{m: map[*health.Board]*health.Board{}}

func memoryOf(b *health.Board) *health.Board {
	memories.Lock()
	defer memories.Unlock()
	if m, ok := memories.m[b]; ok {
		return m
	}
	m := health.NewBoard(time.Now)
	memories.m[b] = m
	return m
}
