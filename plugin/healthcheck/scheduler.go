package healthcheck

import (
	"container/heap"
	"context"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/health"

	"github.com/prometheus/client_golang/prometheus"
)

// maxConcurrent bounds the probes in flight in the whole process (HC-5): it is the size of the
// worker pool. A probe that finds every worker busy waits for one.
const maxConcurrent = 1024

// Registry is the process-wide owner of probes. Each (check, target) is probed once however
// many instances, blocks and consumers want it (H-3). Probes are reference-counted: a reload
// acquires in the new instance before the old one releases, so a target still configured keeps
// its verdict, its threshold counters and its schedule (H-4); the last release stops it at once,
// cancelling a probe in flight.
//
// One scheduler goroutine keeps a timer heap of the next round of every probe and hands the
// probes that are due to a pool of workers. Workers start on demand, up to limit, and live
// until the registry stops: a probe does not pay for a new goroutine and its stack growth.
type Registry struct {
	board  *health.Board
	clock  Clock
	jitter func(time.Duration) time.Duration
	// early lets a round start up to this much before it is due, so one wake of the scheduler
	// dispatches every round of the next moment rather than one wake per round.
	early time.Duration
	// probe runs one attempt; tests replace it to drive thresholds and aggregation.
	probe func(ctx context.Context, run *checkRun, slot int, target netip.AddrPort, url string) attempt

	mu     sync.Mutex
	probes map[probeKey]*probe
	queue  probeHeap
	users  int
	wake   chan struct{}
	quit   chan struct{}
	done   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc

	limit   int          // the most workers
	workers atomic.Int32 // workers started; only the scheduler goroutine changes it
	jobs    chan job     // unbuffered: a send succeeds only when a worker is idle
	wg      sync.WaitGroup
	logged  sync.Map // HC-3: local errors already logged
	rounds  atomic.Uint64
}

// defaultRegistry is the registry of the process, shared by every healthcheck instance.
var defaultRegistry = NewRegistry(health.Default, realClock{})

// NewRegistry returns a registry writing to board with time from clock.
func NewRegistry(board *health.Board, clock Clock) *Registry {
	return &Registry{
		board:  board,
		clock:  clock,
		jitter: uniformJitter,
		early:  50 * time.Millisecond,
		probe:  runAttempt,
		probes: make(map[probeKey]*probe),
		wake:   make(chan struct{}, 1),
		limit:  maxConcurrent,
		jobs:   make(chan job),
	}
}

// uniformJitter spreads first probes uniformly over the interval (HC-5).
func uniformJitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d))) //nolint:gosec // spreading load, not a secret
}

func runAttempt(ctx context.Context, run *checkRun, slot int, target netip.AddrPort, url string) attempt {
	return run.probers[slot].run(ctx, run.check, target, url)
}

type probeKey struct {
	check  string
	target netip.AddrPort
}

// checkRun is a check as one instance runs it: the check and its probers, one per slot
// (region-major), with their metric series resolved once.
type checkRun struct {
	check       *Check
	identity    string
	fleet       *fleetRun // nil when the check's block has no fleet: the replica decides alone
	probers     []*prober
	results     [][3]prometheus.Counter // by slot and outcome
	duration    []prometheus.Observer
	transitions [3]prometheus.Counter // by new state
}

func newCheckRun(c *Check) *checkRun {
	run := &checkRun{check: c, identity: c.identity()}
	for st := health.Unknown; st <= health.Unhealthy; st++ {
		run.transitions[st] = transitions.WithLabelValues(c.Name, st.String())
	}
	for r, reg := range c.Regions {
		for i := range c.ProbersPerRegion {
			run.probers = append(run.probers, newProber(c, reg.Name, c.source(r, i)))
			var cs [3]prometheus.Counter
			for o := noResult; o <= failure; o++ {
				cs[o] = probesTotal.WithLabelValues(c.Name, reg.Name, o.String())
			}
			run.results = append(run.results, cs)
			run.duration = append(run.duration, probeDuration.WithLabelValues(c.Name, reg.Name))
		}
	}
	return run
}

// probe is one (check, target) being probed.
type probe struct {
	key probeKey

	// guarded by Registry.mu
	run   *checkRun   // the latest acquirer's: the one probing
	runs  []*checkRun // one per reference, oldest first
	url   string
	refs  int
	due   time.Time
	index int
	busy  bool // a round is in flight
	gone  bool
	ctx   context.Context
	stop  context.CancelFunc

	gauge prometheus.Gauge // target_state of this (check, target)
	// probing is the fleet gauge of the targets this replica probes (fleet_targets_probed) when
	// the last round probed from at least one region, nil otherwise.
	probing prometheus.Gauge
	ran     uint32 // the regions the last round probed from

	mu      sync.Mutex
	streak  streak        // the thresholds over this replica's rounds, when it decides alone
	probers []proberState // in a fleet: each prober's own state, what this replica publishes
	shared  bool          // the fleet decided the last verdict (F-3)
	state   health.State  // the verdict on the board, and its reason
	reason  string
	targets map[*health.Target]int
	// last is the last attempt of each slot of p.run's check and lastRound the end of the last
	// round, for the status page (S-1); allocated again only when the number of slots changes.
	last      []attempt
	lastRound time.Time
}

type round struct {
	p    *probe
	run  *checkRun
	url  string
	res  []attempt
	left atomic.Int64
	// ran are the regions probed in this round (bit r: region r of the check); every region
	// without a fleet. In a fleet, chosen are the regions this replica publishes; joined says it
	// is a member, shared that the fleet's results decide.
	ran, chosen    uint32
	joined, shared bool
}

type job struct {
	r    *round
	slot int // -1: nothing to probe, only the verdict of a fleet round
}

// start is called by every instance's OnStartup; the first one starts the scheduler.
func (r *Registry) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.users++
	if r.users > 1 {
		return
	}
	r.quit = make(chan struct{})
	r.done = make(chan struct{})
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.workers.Store(0)
	go r.loop(r.quit, r.done)
}

// stop is called by every instance's OnShutdown; the last one stops the scheduler and waits
// for the probes in flight, so nothing outlives the server.
func (r *Registry) stop() {
	r.mu.Lock()
	r.users--
	if r.users > 0 {
		r.mu.Unlock()
		return
	}
	quit, done, cancel := r.quit, r.done, r.cancel
	r.mu.Unlock()
	close(quit)
	cancel()
	<-done
	r.wg.Wait()
}

func (r *Registry) loop(quit, done chan struct{}) {
	defer close(done)
	t := r.clock.NewTimer(time.Hour)
	defer t.Stop()
	var batch []job
	for {
		r.mu.Lock()
		now := r.clock.Now()
		batch = r.due(now, batch[:0])
		next := now.Add(time.Hour)
		if len(r.queue) > 0 {
			next = r.queue[0].due
		}
		r.mu.Unlock()
		if len(batch) > 0 {
			for _, j := range batch {
				if !r.dispatch(j, quit) {
					return
				}
			}
			clear(batch)
			continue // dispatching may have taken time: look at the heap again
		}
		// The wait is computed now, not under the lock: time may have moved meanwhile.
		t.Reset(next.Sub(r.clock.Now()))
		select {
		case <-t.C():
		case <-r.wake:
		case <-quit:
			return
		}
	}
}

// due pops every probe due at now, schedules its next round and returns the attempts to run.
func (r *Registry) due(now time.Time, batch []job) []job {
	horizon := now.Add(r.early)
	for len(r.queue) > 0 && !r.queue[0].due.After(horizon) {
		p := r.queue[0]
		iv := p.run.check.Interval
		p.due = p.due.Add(iv)
		if !p.due.After(now) {
			// Far behind (a clock jump or a long stall): resume the rhythm instead of a burst.
			p.due = now.Add(iv)
		}
		heap.Fix(&r.queue, 0)
		if p.busy {
			continue // the previous round is still running
		}
		p.busy = true
		c := p.run.check
		rd := &round{p: p, run: p.run, url: p.url, res: make([]attempt, c.slots()), ran: 1<<len(c.Regions) - 1}
		if fr := p.run.fleet; fr != nil {
			rd.chosen, rd.joined, rd.shared = fr.f.plan(c, p.key.target.String(), fr.perRegion)
			if rd.shared {
				rd.ran = rd.chosen // F-2: only the regions this replica is chosen for
			}
			r.probing(p, fr.f, rd.ran != 0)
		}
		p.ran = rd.ran
		n := 0
		for reg := range c.Regions {
			if rd.ran&(1<<reg) == 0 {
				continue
			}
			for i := range c.ProbersPerRegion {
				batch = append(batch, job{r: rd, slot: reg*c.ProbersPerRegion + i})
				n++
			}
		}
		if n == 0 {
			n = 1
			batch = append(batch, job{r: rd, slot: -1})
		}
		rd.left.Store(int64(n))
	}
	return batch
}

// dispatch hands j to an idle worker, starts a worker when none is idle and the pool is not
// full, or else waits for one. It returns false when the registry stops.
func (r *Registry) dispatch(j job, quit chan struct{}) bool {
	select {
	case r.jobs <- j:
		return true
	default:
	}
	if int(r.workers.Load()) < r.limit {
		r.workers.Add(1)
		r.wg.Add(1)
		go r.worker(j, quit)
		return true
	}
	select {
	case r.jobs <- j:
		return true
	case <-quit:
		return false
	}
}

func (r *Registry) worker(j job, quit chan struct{}) {
	defer r.wg.Done()
	for {
		r.attempt(j)
		select {
		case j = <-r.jobs:
		case <-quit:
			return
		}
	}
}

func (r *Registry) attempt(j job) {
	rd := j.r
	if j.slot < 0 {
		r.finish(rd)
		return
	}
	a := attempt{outcome: noResult, reason: "probe stopped"}
	if rd.p.ctx.Err() == nil {
		start := time.Now() // a measurement, not a threshold: wall time
		a = r.probe(rd.p.ctx, rd.run, j.slot, rd.p.key.target, rd.url)
		a.took, a.at = time.Since(start), r.clock.Now()
		if rd.p.ctx.Err() != nil {
			// Released while probing: the result says nothing about the target.
			rd.res[j.slot] = attempt{outcome: noResult, reason: "probe stopped"}
			if rd.left.Add(-1) == 0 {
				r.finish(rd)
			}
			return
		}
		if a.outcome != noResult {
			rd.run.duration[j.slot].Observe(a.took.Seconds())
		} else if a.local != nil {
			r.logLocal(rd.run, j.slot, a.local)
		}
		rd.run.results[j.slot][a.outcome].Inc()
	}
	rd.res[j.slot] = a
	if rd.left.Add(-1) == 0 {
		r.finish(rd)
	}
}

// logLocal logs a prober's own error once per (check, prober, kind of error) (HC-3).
func (r *Registry) logLocal(run *checkRun, slot int, err error) {
	p := run.probers[slot]
	src := "any"
	if p.source.IsValid() {
		src = p.source.String()
	}
	k := run.check.Name + "|" + p.region + "|" + src + "|" + localKind(err)
	if _, seen := r.logged.LoadOrStore(k, true); seen {
		return
	}
	log.Warningf("Prober of check %s in region %s (source %s) cannot probe: %v; its probes give no result", run.check.Name, p.region, src, err)
}

// finish turns the attempts of a round into a verdict. Alone, the thresholds apply to the
// round's verdict (HC-2). In a fleet the round feeds the probers' states, which this replica
// publishes for the regions it is chosen for, and while the fleet decides, the verdict is the
// fleet's (F-3, decideShared).
func (r *Registry) finish(rd *round) {
	defer r.rounds.Add(1)
	p := rd.p
	r.mu.Lock()
	p.busy = false
	stale := p.gone || p.run.identity != rd.run.identity
	r.mu.Unlock()
	if stale {
		return
	}
	p.mu.Lock()
	p.remember(rd.res, r.clock.Now())
	p.mu.Unlock()
	c := rd.run.check
	v := aggregate(tallies(c, rd.res, rd.ran))
	if c.Log && v.outcome == failure {
		// Health-check logging (HC-7 with log): every failed round, with why.
		log.Infof("Check %s target %s: probe round failed: %s", c.Name, p.key.target, v.reason)
	}
	if fr := rd.run.fleet; fr != nil {
		p.mu.Lock()
		states := p.proberRound(c, rd.res, rd.ran)
		p.mu.Unlock()
		if rd.joined {
			fr.f.publish(c, p.key.target.String(), states, rd.chosen)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// While the fleet decides, its verdict stands, also after a round planned when this replica
	// decided alone (F-3: the switch came while it ran); the round only fed the published states.
	// Checked under p.mu, so a refresh at the switch and this round do not overwrite each other.
	if rd.run.fleet != nil {
		if r.decideSharedLocked(p, rd.run) {
			return
		}
		if rd.ran != 1<<len(c.Regions)-1 {
			// Planned while the fleet decided, so it probed only the regions this replica
			// publishes, and the fleet no longer decides: too few for a verdict of its own;
			// the next round, planned alone, probes every region (F-4).
			return
		}
	}
	// F-4: a replica that decides alone again after the fleet did starts as from Unknown: its
	// first verdict decides, rather than the fleet's lasting for a threshold's worth of rounds.
	fromShared := p.shared
	if fromShared {
		p.shared = false
		p.streak = streak{}
	}
	st := p.streak.next(c, v.outcome)
	if st == health.Unknown && fromShared && p.state == health.Unknown {
		// The fleet's Unknown (no prober had a state): still none, now this replica's own.
		r.set(p, rd.run, st, v.reason)
	}
	if st == health.Unknown || (st == p.state && !fromShared) {
		return
	}
	reason := v.reason
	if !fromShared && p.state != health.Unknown {
		n, what := p.streak.failures, "failures"
		if st == health.Healthy {
			n, what = p.streak.successes, "successes"
		}
		reason = strconv.Itoa(n) + " consecutive " + what + ": " + reason
	}
	r.set(p, rd.run, st, reason)
}

// set writes the verdict st of p, with its reason, to every target p writes; a change of state
// is counted and logged (HC-7: one line per state change, always). p.mu is held.
func (r *Registry) set(p *probe, run *checkRun, st health.State, reason string) {
	old := p.state
	p.state, p.reason = st, reason
	for t := range p.targets {
		r.board.Restate(t, st, reason)
	}
	if st == old {
		return
	}
	p.gauge.Set(float64(st))
	run.transitions[st].Inc()
	log.Infof("Check %s target %s: %s -> %s (%s)", run.check.Name, p.key.target, old, st, reason)
}

// remember keeps the attempts of a round that ran (S-1); p.mu is held. The slice is reused, so a
// round allocates nothing more than before.
func (p *probe) remember(res []attempt, now time.Time) {
	if len(p.last) != len(res) {
		p.last = make([]attempt, len(res))
	}
	for i, a := range res {
		if !a.at.IsZero() {
			p.last[i] = attempt{outcome: a.outcome, reason: a.reason, took: a.took, at: a.at}
		}
	}
	p.lastRound = now
}

// acquire returns the probe of target with run's check, creating it with its first round
// jittered over the interval (HC-5), and takes a reference. The scheduler must be started.
func (r *Registry) acquire(run *checkRun, target netip.AddrPort) *probe {
	k := probeKey{check: run.check.Name, target: target}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	p, ok := r.probes[k]
	if run.fleet != nil {
		run.fleet.f.subscribe(r)
	}
	if !ok {
		p = &probe{key: k, run: run, url: probeURL(run.check, target), targets: make(map[*health.Target]int)}
		p.ctx, p.stop = context.WithCancel(r.ctx)
		p.due = now.Add(r.jitter(run.check.Interval))
		heap.Push(&r.queue, p)
		r.probes[k] = p
		p.gauge = targetState.WithLabelValues(k.check, target.String())
		p.gauge.Set(float64(health.Unknown))
		r.kick()
	} else {
		r.use(p, run, now)
	}
	p.runs = append(p.runs, run)
	p.refs++
	return p
}

// use makes run the one probing p. A reload with the same (check, target) keeps the state and
// the schedule (H-4); when the probe itself changed, earlier results say nothing about it, so
// the counters restart. A shorter interval brings the next round forward.
func (r *Registry) use(p *probe, run *checkRun, now time.Time) {
	if p.run == run {
		return
	}
	if p.run.identity != run.identity {
		p.mu.Lock()
		p.streak.successes, p.streak.failures = 0, 0
		p.keepProbers(p.run.check, run.check)
		p.mu.Unlock()
	}
	if old := p.run.fleet; old != nil && (run.fleet == nil || run.fleet.f != old.f) {
		pair := pairKey{check: p.key.check, target: p.key.target.String()}
		if run.fleet != nil && run.fleet.f.cfg.name() == old.f.cfg.name() {
			// Another membership of this replica (a reload that changed the connection, or
			// its failure): it publishes this target from now on, under its own lease.
			old.f.handOver(pair, run.fleet.f)
		} else {
			// The fleet changed: this replica no longer publishes this target in the old one.
			old.f.forget(pair)
		}
		r.probing(p, old.f, false)
	}
	p.run = run
	p.url = probeURL(run.check, p.key.target)
	if latest := now.Add(run.check.Interval); p.due.After(latest) {
		p.due = now.Add(r.jitter(run.check.Interval))
		heap.Fix(&r.queue, p.index)
		r.kick()
	}
}

// release drops the reference taken with run; the last one stops the probe at once and
// removes its series. When the latest acquirer releases first (a reload that failed after our
// startup), the previous definition probes again.
func (r *Registry) release(p *probe, run *checkRun) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p.refs--
	for i, x := range p.runs {
		if x == run {
			p.runs = append(p.runs[:i], p.runs[i+1:]...)
			break
		}
	}
	if p.refs > 0 {
		if len(p.runs) > 0 {
			r.use(p, p.runs[len(p.runs)-1], r.clock.Now())
		}
		return
	}
	p.gone = true
	p.stop()
	if fr := p.run.fleet; fr != nil {
		fr.f.forget(pairKey{check: p.key.check, target: p.key.target.String()})
		r.probing(p, fr.f, false)
	}
	heap.Remove(&r.queue, p.index)
	delete(r.probes, p.key)
	targetState.DeleteLabelValues(p.key.check, p.key.target.String())
}

func (r *Registry) kick() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// attach makes p write its verdicts to t, and gives t the verdict p already has (the fleet's
// Unknown included, with its reason).
func (r *Registry) attach(p *probe, t *health.Target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.targets[t]++
	if p.state != health.Unknown || p.reason != "" {
		r.board.Restate(t, p.state, p.reason)
	}
}

// detach undoes one attach.
func (r *Registry) detach(p *probe, t *health.Target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.targets[t]--; p.targets[t] <= 0 {
		delete(p.targets, t)
	}
}

// probeHeap orders probes by their next round.
type probeHeap []*probe

func (h probeHeap) Len() int           { return len(h) }
func (h probeHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h probeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *probeHeap) Push(x any) {
	p := x.(*probe)
	p.index = len(*h)
	*h = append(*h, p)
}

func (h *probeHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	p.index = -1
	return p
}
