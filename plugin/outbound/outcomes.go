package outbound

import (
	"net/netip"
	"sync"
	"time"
)

// The outcomes of an endpoint towards a target (its ranking state) outlive a reload: the new
// instance acquires them in its OnStartup before the old one releases them in its OnShutdown, as
// the health board does for verdicts (H-4). A demoted endpoint stays demoted across a reload,
// and a reload does not send traffic back to a dead path. Outcomes are keyed by endpoint name,
// source address and target, so changing an endpoint's sources starts it afresh.
type outcomeKey struct {
	endpoint string
	src      netip.Addr
	dst      netip.AddrPort
}

type outcomes struct {
	refs int // guarded by store.mu

	mu         sync.Mutex
	succ, tot  float64   // decayed counts
	last       time.Time // when succ and tot were last decayed
	lat        float64   // smoothed latency of successes, seconds; 0 = no data
	lastSample time.Time
	consec     int  // failures since the last success
	due        bool // an error rcode asks for a probe (README, "Ranking")
	nextProbe  time.Time
	down       bool
}

var store = struct {
	mu sync.Mutex
	m  map[outcomeKey]*outcomes
}{m: make(map[outcomeKey]*outcomes)}

func acquireOutcomes(k outcomeKey) *outcomes {
	store.mu.Lock()
	defer store.mu.Unlock()
	o, ok := store.m[k]
	if !ok {
		o = &outcomes{}
		store.m[k] = o
	}
	o.refs++
	return o
}

func releaseOutcomes(k outcomeKey, o *outcomes) {
	store.mu.Lock()
	defer store.mu.Unlock()
	o.refs--
	if o.refs <= 0 && store.m[k] == o {
		delete(store.m, k)
	}
}
