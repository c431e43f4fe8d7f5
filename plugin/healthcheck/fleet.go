package healthcheck

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Timing of the fleet (docs/DESIGN.md section 8).
const (
	// fleetMinTTL is the shortest lease of a replica's membership and of its published results
	// (F-1): a replica that dies drops out, and its results stop counting, when it expires.
	fleetMinTTL = 3 * time.Second
	// fleetBeat is how often the lease is renewed, etcd is asked for its revision and the watch
	// for its progress (the view is current once the watch has delivered up to that revision),
	// and failed writes are tried again.
	fleetBeat = 500 * time.Millisecond
	// fleetRetry is the wait between two attempts to join.
	fleetRetry = time.Second
	// fleetRevokeWait bounds a revocation at shutdown: a stop or a reload never waits longer for
	// an etcd that does not answer; the lease then expires by itself.
	fleetRevokeWait = 500 * time.Millisecond
	// fleetMaxOps bounds the operations of one etcd transaction (etcd's default --max-txn-ops).
	fleetMaxOps = 128
)

// leaseTTL is the lease of a replica whose etcd requests time out after timeout: the timeout
// plus one second, in whole seconds, at least fleetMinTTL. A renewal that takes the whole
// timeout still lands before the lease expires, so a replica keeps its membership through an
// outage it has not given up on (F-1, F-4).
func leaseTTL(timeout time.Duration) time.Duration {
	ttl := timeout + time.Second
	if ttl%time.Second != 0 {
		ttl = ttl.Truncate(time.Second) + time.Second
	}
	return max(ttl, fleetMinTTL)
}

// processNonce tells this process's member keys from another process's with the same replica
// name: one per process, so a reload that makes a new membership of the same name takes the
// old one's key over instead of seeing a duplicate.
var processNonce = func() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

// fleet is this process's membership of a fleet: one etcd client, one lease, one watch of the
// prefix, and the mirror of what every member published. It is process-wide and counted by the
// Corefile instances that configure it, like the probe registry: a reload with the same fleet
// block keeps the membership, its lease and its watch (no second registration, no new lease).
type fleet struct {
	cfg  *fleetConfig
	now  func() time.Time
	refs int // guarded by fleets.mu
	// superseded is set while a newer membership of this process has the same prefix and
	// replica name (a reload that changed the timeout, say): this one neither claims the name
	// nor writes, so the two do not overwrite each other's keys.
	superseded atomic.Bool

	cli    *clientv3.Client
	cancel context.CancelFunc
	done   chan struct{}
	kick   chan struct{} // something to write: results or the registration
	// handover takes the requests of a leaving membership of the same name (takeOver).
	handover chan chan bool

	gMembers, gTargets, gFallback  prometheus.Gauge
	cPublished, cReceived, cErrors prometheus.Counter

	mu     sync.RWMutex
	views  []*fleetView // the instances using the fleet, oldest first; the newest is registered
	regDue bool         // the registration may have changed
	regVal string       // the registration written under the current lease
	// lease is the current session's, from its grant on (stop revokes it, joined or not); old is
	// an ended session's, revoked by the next session or by stop.
	lease, old clientv3.LeaseID
	joined     bool // a session is up: the member key and the watch exist
	rejoin     bool // a session was up before: the next join is a rejoin
	// since is when the view became current: the join, or the end of an outage. The fleet decides
	// a check only one interval after it, when every member has had a round to publish.
	since time.Time
	// heard is when the view was last known current (F-4): the time a linearizable read (a
	// list, or the read of every beat) was asked whose revision the mirror has reached. A
	// renewal does not count: it may go through a member whose watch is not this one's; nor does
	// an answer of the watch alone (reached).
	heard time.Time
	// seen is the revision up to which the mirror has everything (the list's, then the watch's);
	// marks are revisions etcd returned to linearizable reads that the watch has not reached yet.
	seen  int64
	marks []revMark
	// unwritten is since when a write of due results has been failing, zero while none is (F-4):
	// an etcd that refuses writes (its space quota exceeded) freezes the fleet's view.
	unwritten time.Time
	alarm     string // etcd's alarms at the last look (NOSPACE: it refuses every write)
	statusErr string // the other errors of etcd's status at the last look (logged when they change)
	lastErr   error  // the last etcd error, for the log line
	outage    bool   // the fleet's view went stale while joined (logged); changed by the session only
	fallback  bool   // as exported (fleet_fallback)
	dup       bool   // the replica name is taken by another process (logged once)
	mirror    mirror
	regs      map[*Registry]struct{} // the registries probing with this fleet, told of changes
	// want is what this replica publishes, by (check, target) and region; published is what it
	// wrote under the current lease; dirty are the keys where they may differ.
	want      map[pairKey]map[string]tally
	published map[resultKey]tally
	dirty     map[resultKey]struct{}
	// The watch and the writes of this replica's own results race: an event may come before the
	// reply of a write made before it, or after the reply of a write made after it.
	// inflight are the keys of the Txn waiting for its reply, with the revision of the latest
	// event of each the watch delivered meanwhile (0: none); lostAt, for those, the revision at
	// which the watch showed the key deleted or overwritten meanwhile (a write applied before it
	// did not stick); wroteAt, the revision of this session's last write of a key, until the watch
	// delivers that write's own event (an event before it is old news; events come in order).
	inflight map[resultKey]int64
	lostAt   map[resultKey]int64
	wroteAt  map[resultKey]int64
	// handed are the regions of each pair that handOver passed to another membership of this
	// process, when this one has not published or withdrawn the pair since: what reclaim
	// publishes again when that membership leaves without having taken them over.
	handed map[pairKey]map[string]struct{}
}

// revMark is a revision etcd returned to a linearizable read, and when the read was asked.
type revMark struct {
	rev   int64
	asked time.Time
}

// maxMarks bounds the marks kept while the watch lags: the newest count, older ones are implied.
const maxMarks = 16

// fleetView is what one instance registers: the prober regions of each check that the fleet
// block's healthcheck block defines.
type fleetView struct {
	checks map[string][]string
	warm   time.Duration // the longest interval of the checks: the fleet decides them all after it
}

func newFleetView(checks []*Check) *fleetView {
	v := &fleetView{checks: make(map[string][]string, len(checks))}
	for _, c := range checks {
		for _, r := range c.Regions {
			v.checks[c.Name] = append(v.checks[c.Name], r.Name)
		}
		v.warm = max(v.warm, c.Interval)
	}
	return v
}

// fleetRun is a check's fleet as one instance runs it.
type fleetRun struct {
	f         *fleet
	perRegion int
}

// fleets owns the fleet memberships of the process: by connection identity, and by prefix and
// replica name (oldest first: the newest holds the name).
var fleets = struct {
	sync.Mutex
	m     map[string]*fleet
	names map[string][]*fleet
}{m: make(map[string]*fleet), names: make(map[string][]*fleet)}

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
		name := cfg.name()
		for _, o := range fleets.names[name] {
			o.superseded.Store(true)
		}
		fleets.names[name] = append(fleets.names[name], f)
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
// member and its results leave the fleet at once rather than when the lease expires. When another
// membership of this process has the same name (a reload that changed the connection, which
// succeeded or failed), it becomes the one that writes, and it takes this replica's member key
// and results over under its own lease before this one's lease is revoked: they are never
// deleted in between. When it cannot (not joined, or etcd slow to answer), the lease is not
// revoked and expires by itself, so what the heir relies on stays until the heir has written
// it. The end waits at most fleetRevokeWait for each of the handover and the revocation, and
// not under the process's fleets lock.
func (f *fleet) leave(view *fleetView) {
	fleets.Lock()
	f.mu.Lock()
	if i := slices.Index(f.views, view); i >= 0 {
		f.views = slices.Delete(f.views, i, i+1)
	}
	f.mu.Unlock()
	if f.refs--; f.refs > 0 {
		f.register()
		fleets.Unlock()
		return
	}
	delete(fleets.m, f.cfg.identity())
	name := f.cfg.name()
	if rest := slices.DeleteFunc(fleets.names[name], func(o *fleet) bool { return o == f }); len(rest) > 0 {
		fleets.names[name] = rest
	} else {
		delete(fleets.names, name)
	}
	fleets.Unlock()
	// f writes nothing from now on; only then may the heir write.
	f.halt()
	fleets.Lock()
	var heir *fleet
	if rest := fleets.names[name]; len(rest) > 0 {
		heir = rest[len(rest)-1]
		heir.superseded.Store(false)
	}
	fleets.Unlock()
	f.end(heir == nil || heir.takeOver(fleetRevokeWait))
}

func newFleet(cfg *fleetConfig) *fleet {
	r := cfg.Replica
	fleetSeries.Hold(r)
	f := &fleet{
		cfg:        cfg,
		now:        time.Now,
		kick:       make(chan struct{}, 1),
		handover:   make(chan chan bool),
		gMembers:   fleetMembers.WithLabelValues(r),
		gTargets:   fleetTargets.WithLabelValues(r),
		gFallback:  fleetFallback.WithLabelValues(r),
		cPublished: fleetPublished.WithLabelValues(r),
		cReceived:  fleetReceived.WithLabelValues(r),
		cErrors:    fleetErrors.WithLabelValues(r),
		mirror:     newMirror(),
		regs:       make(map[*Registry]struct{}),
		want:       make(map[pairKey]map[string]tally),
		published:  make(map[resultKey]tally),
		dirty:      make(map[resultKey]struct{}),
		lostAt:     make(map[resultKey]int64),
		handed:     make(map[pairKey]map[string]struct{}),
		inflight:   make(map[resultKey]int64),
		wroteAt:    make(map[resultKey]int64),
	}
	f.setFallback(true)
	return f
}

// registration is the member value of the newest view.
func (f *fleet) registration() []byte {
	v := memberValue{Nonce: processNonce, Checks: map[string][]string{}}
	if n := len(f.views); n > 0 {
		v.Checks = f.views[n-1].checks
	}
	b, _ := json.Marshal(v)
	return b
}

// warm is how long after the view became current the fleet decides every check of the newest
// view: its longest interval.
func (f *fleet) warm() time.Duration {
	if n := len(f.views); n > 0 {
		return f.views[n-1].warm
	}
	return 0
}

// register writes the newest view as this replica's membership: at once into the mirror, so the
// sharding and the tallies count this replica's regions from now on, and to etcd by the session.
func (f *fleet) register() {
	f.mu.Lock()
	f.regDue = true
	changed := f.joined && f.mirror.applyMember(f.cfg.Replica, f.registration())
	if changed {
		f.viewChanged()
	}
	f.mu.Unlock()
	f.poke()
	if changed {
		f.membersChanged()
	}
}

// takeOver has f, the membership of its name that writes, write its registration and every
// result it publishes under its own lease now, wherever this process's keys of the name are (under
// the lease of a membership that leaves), so that the one leaving can revoke its lease without
// deleting them. It reports whether f did, within wait: its session does it once joined
// (reclaim); a membership still joining when wait ends registers as it joins and publishes what
// it was handed with its first write.
func (f *fleet) takeOver(wait time.Duration) bool {
	done := make(chan bool, 1)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case f.handover <- done:
	case <-t.C:
		return false
	}
	select {
	case ok := <-done:
		return ok
	case <-t.C:
		return false
	}
}

// handOver passes this process's result of pair from f to g, a membership of the same name that
// probes the target from now on (a reload that changed the connection, or the failure of one):
// g publishes it under its own lease as soon as it writes, not at its next round, and f no longer
// withdraws it. Until g has written it, the key stays under f's lease (leave).
func (f *fleet) handOver(pair pairKey, g *fleet) {
	f.mu.Lock()
	w := f.want[pair]
	delete(f.want, pair)
	for region := range w {
		delete(f.dirty, resultKey{pair: pair, region: region})
	}
	if len(w) > 0 {
		regions := make(map[string]struct{}, len(w))
		for region := range w {
			regions[region] = struct{}{}
		}
		f.handed[pair] = regions
	}
	f.mu.Unlock()
	if len(w) == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.want[pair] != nil {
		return
	}
	delete(g.handed, pair)
	g.want[pair] = w
	for region := range w {
		g.dirty[resultKey{pair: pair, region: region}] = struct{}{}
	}
	g.poke()
}

func (f *fleet) poke() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// mode says how a round of a check with interval iv runs (F-3, F-4). joined: this replica is a
// member, it publishes what it is chosen to probe. shared: the fleet's results decide, because
// the view is fresh (stale says so) and was known current within 3 intervals (a shared verdict
// is never older), and the view has been current for an interval, so every member has
// had a round to publish since a join or an outage. Otherwise the replica probes everything and
// decides alone. f.mu is held.
func (f *fleet) mode(iv time.Duration) (joined, shared bool) {
	if !f.joined {
		return false, false
	}
	if f.dup || f.superseded.Load() {
		return true, false
	}
	now := f.now()
	return true, f.stale(now) == "" && now.Sub(f.heard) <= 3*iv && now.Sub(f.since) >= iv
}

// stale says why this replica's view of the fleet cannot be trusted at now, "" when it can: it
// was last known current (heard) longer than the renewal period plus the timeout ago, this replica's
// due results have failed to be written for as long, or etcd reports an alarm (it refuses
// writes, so the others' results are frozen too). f.mu is held.
func (f *fleet) stale(now time.Time) string {
	limit := fleetBeat + f.cfg.Timeout
	switch {
	case now.Sub(f.heard) > limit:
		return "etcd unreachable (its watch not current for " + seconds(now.Sub(f.heard)) + ")"
	case !f.unwritten.IsZero() && now.Sub(f.unwritten) > limit:
		return "etcd refuses writes (results unwritten for " + seconds(now.Sub(f.unwritten)) + ")"
	case f.alarm != "":
		return "etcd refuses writes (alarm " + f.alarm + ")"
	}
	return ""
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

// publish records this replica's prober states of target (one tally per region that ran, see
// probe.proberRound) for the regions it is chosen for, and the withdrawal of every other region,
// one a reload removed from the check included; the session writes what changed (F-3: writes
// follow state changes).
func (f *fleet) publish(c *Check, target string, states []tally, chosenRegions uint32) {
	pair := pairKey{check: c.Name, target: target}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.handed, pair) // this membership decides about it again
	if !f.joined {
		return
	}
	w := f.want[pair]
	changed := false
	for region := range w {
		if r := slices.IndexFunc(c.Regions, func(reg Region) bool { return reg.Name == region }); r < 0 || chosenRegions&(1<<r) == 0 {
			delete(w, region)
			f.dirty[resultKey{pair: pair, region: region}] = struct{}{}
			changed = true
		}
	}
	for r, reg := range c.Regions {
		if chosenRegions&(1<<r) == 0 {
			continue
		}
		k := resultKey{pair: pair, region: reg.Name}
		i := slices.IndexFunc(states, func(t tally) bool { return t.region == reg.Name })
		if i < 0 || states[i].got == 0 {
			// No prober of the region has a state: nothing to say.
			if _, ok := w[reg.Name]; ok {
				delete(w, reg.Name)
				f.dirty[k] = struct{}{}
				changed = true
			}
			continue
		}
		if t, ok := w[reg.Name]; ok && t == states[i] {
			continue
		}
		if w == nil {
			w = make(map[string]tally, len(c.Regions))
			f.want[pair] = w
		}
		w[reg.Name] = states[i]
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
	delete(f.handed, pair)
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

// shared returns the fleet's tallies of pair as the mirror holds them (F-3: what etcd holds and
// nothing else), when the fleet decides a check of interval iv now; ok is false when it does not.
func (f *fleet) shared(pair pairKey, iv time.Duration) (ts []tally, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if _, shared := f.mode(iv); !shared {
		return nil, false
	}
	return f.mirror.tallies(pair), true
}

// subscribe has r replan its probes and decide them again when the fleet changes.
func (f *fleet) subscribe(r *Registry) {
	f.mu.Lock()
	f.regs[r] = struct{}{}
	f.mu.Unlock()
}

func (f *fleet) registries() []*Registry {
	f.mu.RLock()
	defer f.mu.RUnlock()
	regs := make([]*Registry, 0, len(f.regs))
	for r := range f.regs {
		regs = append(regs, r)
	}
	return regs
}

// membersChanged tells the subscribed registries that the members or their regions changed:
// the sharding moves and every tally may count other members. f.mu must not be held (the
// registries call plan).
func (f *fleet) membersChanged() {
	for _, r := range f.registries() {
		r.replan(f)
		r.refresh(f, nil)
	}
}

// resultsChanged tells the subscribed registries that other replicas' results of pairs changed,
// so they decide those targets again now (F-3); f.mu must not be held.
func (f *fleet) resultsChanged(pairs []pairKey) {
	for _, r := range f.registries() {
		r.refresh(f, pairs)
	}
}

// viewChanged logs the fleet's members and exports their number; f.mu is held.
func (f *fleet) viewChanged() {
	f.gMembers.Set(float64(len(f.mirror.members)))
	log.Infof("Fleet %s (replica %s): %d members: %s", f.cfg.Prefix, f.cfg.Replica, len(f.mirror.members), f.mirror.describe())
}

// setFallback exports whether the replica decides alone; f.mu is held (or f is new).
func (f *fleet) setFallback(on bool) {
	f.fallback = on
	if on {
		f.gFallback.Set(1)
	} else {
		f.gFallback.Set(0)
	}
}

func seconds(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }
