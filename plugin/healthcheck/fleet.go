package healthcheck

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Timing of the fleet (docs/DESIGN.md section 8).
const (
	// fleetTTL is the lease of a replica's membership and of its published results (F-1): a
	// replica that dies drops out, and its results stop counting, when it expires.
	fleetTTL = 3 * time.Second
	// fleetBeat is how often the lease is renewed; each answer confirms that this replica's view
	// of the fleet is current (the watch shares the renewal's connection).
	fleetBeat = fleetTTL / 6
	// fleetRetry is the wait between two attempts to join.
	fleetRetry = time.Second
	// fleetMaxOps bounds the operations of one etcd transaction (etcd's default --max-txn-ops).
	fleetMaxOps = 128
)

// fleet is this process's membership of a fleet: one etcd client, one lease, one watch of the
// prefix, and the mirror of what every member published. It is process-wide and counted by the
// Corefile instances that configure it, like the probe registry: a reload with the same fleet
// block keeps the membership, its lease and its watch (no second registration, no new lease).
type fleet struct {
	cfg   *fleetConfig
	nonce string // tells this process from another that took the same replica name
	now   func() time.Time
	refs  int // guarded by fleets.mu

	cli    *clientv3.Client
	cancel context.CancelFunc
	done   chan struct{}
	kick   chan struct{} // something to write: results or the registration

	gMembers, gTargets, gFallback  prometheus.Gauge
	cPublished, cReceived, cErrors prometheus.Counter

	mu     sync.RWMutex
	views  []*fleetView // the instances using the fleet, oldest first; the newest is registered
	regDue bool         // the registration may have changed
	regVal string       // the registration written under the current lease
	lease  clientv3.LeaseID
	old    clientv3.LeaseID // the lease of an ended session, revoked at the next one
	joined bool             // a session is up: the member key and the watch exist
	// since is when the view became current: the join, or the end of an outage. The fleet decides
	// a check only one interval after it, when every member has had a round to publish.
	since time.Time
	// confirmed is the last time etcd answered: a renewal or a watch response.
	confirmed time.Time
	fallback  bool // as logged and exported
	dup       bool // the replica name is taken by another process (logged once)
	mirror    mirror
	regs      map[*Registry]struct{} // the registries probing with this fleet, told of member changes
	// want is what this replica publishes, by (check, target) and region; published is what it
	// wrote under the current lease; dirty are the keys where they may differ.
	want      map[pairKey]map[string]string
	published map[resultKey]string
	dirty     map[resultKey]struct{}
}

// fleetView is what one instance registers: the prober regions of each check that the fleet
// block's healthcheck block defines.
type fleetView struct {
	checks map[string][]string
}

func newFleetView(checks []*Check) *fleetView {
	v := &fleetView{checks: make(map[string][]string, len(checks))}
	for _, c := range checks {
		for _, r := range c.Regions {
			v.checks[c.Name] = append(v.checks[c.Name], r.Name)
		}
	}
	return v
}

// fleetRun is a check's fleet as one instance runs it.
type fleetRun struct {
	f         *fleet
	perRegion int
}

// fleets owns the fleet memberships of the process, by connection identity.
var fleets = struct {
	sync.Mutex
	m map[string]*fleet
}{m: make(map[string]*fleet)}

// joinFleet returns the process's membership for cfg, starting it for the first instance, and
// registers view as the newest instance's. It never waits for etcd (F-4): joining goes on in the
// background while the replica probes and decides alone.
func joinFleet(cfg *fleetConfig, view *fleetView) *fleet {
	fleets.Lock()
	defer fleets.Unlock()
	f := fleets.m[cfg.identity()]
	if f == nil {
		f = newFleet(cfg)
		fleets.m[cfg.identity()] = f
		f.start()
	}
	f.refs++
	f.mu.Lock()
	f.views = append(f.views, view)
	f.mu.Unlock()
	f.register()
	return f
}

// leave drops the instance's view; the last one ends the membership: the lease is revoked, so the
// member and its results leave the fleet at once rather than when the lease expires.
func (f *fleet) leave(view *fleetView) {
	fleets.Lock()
	defer fleets.Unlock()
	f.mu.Lock()
	if i := slices.Index(f.views, view); i >= 0 {
		f.views = slices.Delete(f.views, i, i+1)
	}
	f.mu.Unlock()
	if f.refs--; f.refs > 0 {
		f.register()
		return
	}
	delete(fleets.m, f.cfg.identity())
	f.stop()
}

func newFleet(cfg *fleetConfig) *fleet {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	r := cfg.Replica
	fleetSeries.Hold(r)
	f := &fleet{
		cfg:        cfg,
		nonce:      hex.EncodeToString(b),
		now:        time.Now,
		kick:       make(chan struct{}, 1),
		gMembers:   fleetMembers.WithLabelValues(r),
		gTargets:   fleetTargets.WithLabelValues(r),
		gFallback:  fleetFallback.WithLabelValues(r),
		cPublished: fleetPublished.WithLabelValues(r),
		cReceived:  fleetReceived.WithLabelValues(r),
		cErrors:    fleetErrors.WithLabelValues(r),
		mirror:     newMirror(),
		regs:       make(map[*Registry]struct{}),
		fallback:   true,
		want:       make(map[pairKey]map[string]string),
		published:  make(map[resultKey]string),
		dirty:      make(map[resultKey]struct{}),
	}
	f.gFallback.Set(1)
	return f
}

// registration is the member value of the newest view.
func (f *fleet) registration() []byte {
	v := memberValue{Nonce: f.nonce, Checks: map[string][]string{}}
	if n := len(f.views); n > 0 {
		v.Checks = f.views[n-1].checks
	}
	b, _ := json.Marshal(v)
	return b
}

// register writes the newest view as this replica's membership: at once into the mirror, so the
// sharding counts this replica's regions from now on, and to etcd by the session.
func (f *fleet) register() {
	f.mu.Lock()
	f.regDue = true
	if f.joined && f.mirror.applyMember(f.cfg.Replica, f.registration()) {
		f.viewChanged()
	}
	f.mu.Unlock()
	f.poke()
}

func (f *fleet) poke() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// mode says how a round of a check with interval iv runs (F-3, F-4). joined: this replica is a
// member, it publishes what it is chosen to probe. shared: the fleet's results decide, because
// etcd answered within the timeout and within 3 intervals (a shared verdict is never older), and
// the view has been current for an interval, so every member has had a round to publish since a
// join or an outage. Otherwise the replica probes everything and decides alone.
func (f *fleet) mode(iv time.Duration) (joined, shared bool) {
	if !f.joined {
		return false, false
	}
	now := f.now()
	age := now.Sub(f.confirmed)
	fresh := age <= fleetBeat+f.cfg.Timeout && age <= 3*iv
	return true, fresh && !f.dup && now.Sub(f.since) >= iv
}

// plan returns, for one round of c on target, the regions (bit r: c.Regions[r]) this replica is
// chosen to probe from by rendezvous hashing among the live members of each region (F-2), and
// the mode of the round.
func (f *fleet) plan(c *Check, target string, perRegion int) (chosenRegions uint32, joined, shared bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	joined, shared = f.mode(c.Interval)
	if !joined {
		return 0, false, false
	}
	me := f.cfg.Replica
	for r, reg := range c.Regions {
		members := f.mirror.probers[proberKey(c.Name, reg.Name)]
		if chosen(members, me, c.Name+"|"+target+"|"+reg.Name, perRegion) {
			chosenRegions |= 1 << r
		}
	}
	return chosenRegions, true, shared
}

// publish records the tallies of a round for the regions this replica is chosen for, and the
// withdrawal of the others; the session writes what changed (F-3: writes follow changes).
func (f *fleet) publish(c *Check, target string, local []tally, chosenRegions uint32) {
	pair := pairKey{check: c.Name, target: target}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.joined {
		return
	}
	w := f.want[pair]
	changed := false
	for r, reg := range c.Regions {
		k := resultKey{pair: pair, region: reg.Name}
		if chosenRegions&(1<<r) == 0 {
			if _, ok := w[reg.Name]; ok {
				delete(w, reg.Name)
				f.dirty[k] = struct{}{}
				changed = true
			}
			continue
		}
		i := slices.IndexFunc(local, func(t tally) bool { return t.region == reg.Name })
		if i < 0 {
			continue
		}
		v := encodeTally(local[i])
		if w[reg.Name] == v {
			continue
		}
		if w == nil {
			w = make(map[string]string, len(c.Regions))
			f.want[pair] = w
		}
		w[reg.Name] = v
		f.dirty[k] = struct{}{}
		changed = true
	}
	if len(w) == 0 {
		delete(f.want, pair)
	}
	if changed {
		f.poke()
	}
}

// forget withdraws every result of pair: the target is no longer probed by this process.
func (f *fleet) forget(pair pairKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.want[pair]
	if w == nil {
		return
	}
	for region := range w {
		f.dirty[resultKey{pair: pair, region: region}] = struct{}{}
	}
	delete(f.want, pair)
	f.poke()
}

// tallies returns the fleet's tallies of pair, with this replica's current ones (F-3).
func (f *fleet) tallies(pair pairKey, mine []tally) []tally {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.mirror.tallies(pair, f.cfg.Replica, mine)
}

// subscribe has r replan its probes when the members change.
func (f *fleet) subscribe(r *Registry) {
	f.mu.Lock()
	f.regs[r] = struct{}{}
	f.mu.Unlock()
}

// membersChanged tells the subscribed registries; f.mu must not be held (they call plan).
func (f *fleet) membersChanged() {
	f.mu.RLock()
	regs := make([]*Registry, 0, len(f.regs))
	for r := range f.regs {
		regs = append(regs, r)
	}
	f.mu.RUnlock()
	for _, r := range regs {
		r.replan(f)
	}
}

// viewChanged logs the fleet's members and exports their number; f.mu is held.
func (f *fleet) viewChanged() {
	f.gMembers.Set(float64(len(f.mirror.members)))
	log.Infof("Fleet %s (replica %s): %d members: %s", f.cfg.Prefix, f.cfg.Replica, len(f.mirror.members), f.mirror.describe())
}
