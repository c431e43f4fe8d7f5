// Package health is the process-wide health board shared by the coresteer plugins, and the probe
// demand through which they say what is probed (Demand, H-6).
//
// Probes (healthcheck) and aggregations (pschealth) write the state of targets; answers
// (routingpolicy) and forwarding (outbound) read it. Consumers resolve a *Target once, at load
// time, and then read its state with a single atomic load on the query path (H-5). The rules H-1
// to H-6 are in docs/DESIGN.md of the repository, section 2.
package health

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// State is the health of one target.
type State uint32

// The states of a target (H-1).
const (
	Unknown State = iota
	Healthy
	Unhealthy
)

// String returns the lower-case name of s.
func (s State) String() string {
	switch s {
	case Healthy:
		return "healthy"
	case Unhealthy:
		return "unhealthy"
	default:
		return "unknown"
	}
}

// Key names a target. Check is the name of the check that probes Addr; it is empty for a
// derived virtual IP (a load-balancer group or a pschealth destination) whose state is computed.
// Port is zero unless the target is probed on a port of its own rather than the check's.
type Key struct {
	Check string
	Addr  netip.Addr
	Port  uint16
}

// String returns "check/addr[:port]", or the address alone for a derived key.
func (k Key) String() string {
	a := k.Addr.String()
	if k.Port != 0 {
		a = netip.AddrPortFrom(k.Addr, k.Port).String()
	}
	if k.Check == "" {
		return a
	}
	return k.Check + "/" + a
}

// Status is the state of a target with the time and reason of its last change (H-1).
type Status struct {
	State  State
	Since  time.Time
	Reason string
}

// Change is what subscribers are told when a target changes state.
type Change struct {
	Key      Key
	Old, New Status
}

// Target is one entry of the board. Its methods are safe for concurrent use; State, Healthy
// and Checked do not lock and do not allocate.
type Target struct {
	key        Key
	publishers atomic.Int32
	status     atomic.Pointer[Status]
	writeMu    sync.Mutex // serializes writers; readers only load status
	refs       int        // guarded by Board.mu
}

// Key returns the key of t.
func (t *Target) Key() Key { return t.key }

// State returns the current state of t.
func (t *Target) State() State { return t.status.Load().State }

// Healthy reports whether t may be served: Unknown counts as healthy (H-2), so a new target
// is served until a verdict says otherwise.
func (t *Target) Healthy() bool { return t.status.Load().State != Unhealthy }

// Checked reports whether something publishes the state of t: a probe, a load-balancer group
// or a composite. An address nobody checks is always served.
func (t *Target) Checked() bool { return t.publishers.Load() > 0 }

// Decided reports whether t has had a first verdict.
func (t *Target) Decided() bool { return t.status.Load().State != Unknown }

// Status returns the state of t with the time and reason of its last change.
func (t *Target) Status() Status { return *t.status.Load() }

// Board holds the health of every watched target in the process.
type Board struct {
	now func() time.Time

	mu      sync.Mutex
	targets map[Key]*Target

	// subs is replaced, never changed in place, so notify reads it without a lock and a
	// subscriber may itself write the board.
	subMu  sync.Mutex
	subs   atomic.Pointer[[]subscriber]
	nextID int
}

type subscriber struct {
	id int
	fn func(Change)
}

// Default is the board of the process; plugins use it unless a test gives them another.
var Default = NewBoard(time.Now)

// NewBoard returns an empty board whose change times come from now.
func NewBoard(now func() time.Time) *Board {
	return &Board{now: now, targets: make(map[Key]*Target)}
}

// Acquire returns the target for k, creating it in state Unknown, and takes a reference on it.
// Every Acquire is paired with a Release; a target lives while it has references, so a reload
// that acquires before the old instance releases keeps the verdict (H-4).
func (b *Board) Acquire(k Key) *Target {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.targets[k]
	if !ok {
		t = &Target{key: k}
		t.status.Store(&Status{State: Unknown, Since: b.now(), Reason: "new target"})
		b.targets[k] = t
	}
	t.refs++
	return t
}

// Targets returns every target on the board, ordered by check, address and port. It is the
// board's read-only enumeration for the status page (S-1): the targets can only be read through
// it (Target has no method that writes), and the list is a copy, so the board may change while
// the caller reads it.
func (b *Board) Targets() []*Target {
	b.mu.Lock()
	out := make([]*Target, 0, len(b.targets))
	for _, t := range b.targets {
		out = append(out, t)
	}
	b.mu.Unlock()
	slices.SortFunc(out, func(x, y *Target) int { return x.key.compare(y.key) })
	return out
}

// compare orders keys by check, address and port.
func (k Key) compare(o Key) int {
	if c := strings.Compare(k.Check, o.Check); c != 0 {
		return c
	}
	if c := k.Addr.Compare(o.Addr); c != 0 {
		return c
	}
	return cmp.Compare(k.Port, o.Port)
}

// Release drops a reference taken by Acquire; the last one removes the target and its state.
func (b *Board) Release(t *Target) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t.refs--
	if t.refs <= 0 && b.targets[t.key] == t {
		delete(b.targets, t.key)
	}
}

// Publish marks t as checked by one more publisher; Unpublish undoes it.
func (b *Board) Publish(t *Target) { t.publishers.Add(1) }

// Unpublish undoes one Publish.
func (b *Board) Unpublish(t *Target) { t.publishers.Add(-1) }

// Set records state s for t with reason. It returns true and notifies subscribers when the state
// changed; setting the same state again keeps the time and reason of the last change.
func (b *Board) Set(t *Target, s State, reason string) bool { return b.set(t, s, reason, false) }

// Restate is Set, except that setting the same state again replaces its reason (keeping the time
// of the last change, and telling no subscriber): for a verdict whose reason says what it is now
// made of, as a fleet's shared verdict does.
func (b *Board) Restate(t *Target, s State, reason string) bool { return b.set(t, s, reason, true) }

func (b *Board) set(t *Target, s State, reason string, restate bool) bool {
	t.writeMu.Lock()
	old := t.status.Load()
	if old.State == s {
		if restate && old.Reason != reason {
			t.status.Store(&Status{State: s, Since: old.Since, Reason: reason})
		}
		t.writeMu.Unlock()
		return false
	}
	next := &Status{State: s, Since: b.now(), Reason: reason}
	t.status.Store(next)
	t.writeMu.Unlock()
	b.notify(Change{Key: t.key, Old: *old, New: *next})
	return true
}

func (b *Board) notify(c Change) {
	if subs := b.subs.Load(); subs != nil {
		for _, s := range *subs {
			s.fn(c)
		}
	}
}

// Subscribe calls fn for every state change until the returned cancel is called. fn runs on the
// writer's goroutine, so it must be quick and must not block; it may write the board.
func (b *Board) Subscribe(fn func(Change)) (cancel func()) {
	b.subMu.Lock()
	id := b.nextID
	b.nextID++
	b.swapSubs(func(old []subscriber) []subscriber { return append(old, subscriber{id, fn}) })
	b.subMu.Unlock()
	return func() {
		b.subMu.Lock()
		b.swapSubs(func(old []subscriber) []subscriber {
			return slices.DeleteFunc(old, func(s subscriber) bool { return s.id == id })
		})
		b.subMu.Unlock()
	}
}

// swapSubs replaces the subscriber list with edit applied to a copy of it; b.subMu is held.
func (b *Board) swapSubs(edit func([]subscriber) []subscriber) {
	var cur []subscriber
	if p := b.subs.Load(); p != nil {
		cur = slices.Clone(*p)
	}
	next := edit(cur)
	b.subs.Store(&next)
}
