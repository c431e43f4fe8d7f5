package outbound

import (
	"math"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/region"

	"github.com/miekg/dns"
)

// Ranking (O-5, O-6). The exact score is written down in README.md, section "Ranking"; keep the
// two in step.
// defaultHalfLife is how fast old outcomes fade from the success ratio.
const defaultHalfLife = 10 * time.Second

// halfLife holds the half-life in nanoseconds; tests that run on the wall clock shorten it.
var halfLife atomic.Int64

func init() { halfLife.Store(int64(defaultHalfLife)) }

const (
	// priorWeight is the pseudo-count of one success every ratio starts from: no data reads as
	// ratio 1, and failures nobody re-tests fade back towards 1.
	priorWeight = 1.0
	// failBandWidth: success ratios are compared in bands this wide (0.95-1 is band 0).
	failBandWidth = 0.05
	// latBandBase: latencies are compared in bands 25 % wide, starting at 1 ms.
	latBandBase = 1.25
	// latAlpha is the weight of a new sample in the smoothed latency.
	latAlpha = 0.3
	// Hysteresis: the current leader of a region is scored with its ratio raised by one band and
	// its latency lowered by one band, so a challenger must be better by more than a band.
	leaderRatioBonus = failBandWidth
	leaderLatFactor  = 1 / latBandBase
	// downRatio and upRatio bound the up/down state used for metrics and recovery counting.
	downRatio = 0.5
	upRatio   = 0.9
	// demoteAfter consecutive failures demote a pair below every pair that has not failed so
	// in a row, whatever its ratio: under load the ratio moves slowly, a dead path must not.
	demoteAfter   = 2
	demotedOffset = 1000
	// rerankEvery bounds how stale a ranking is when nothing fails.
	rerankEvery = time.Second
)

// failGen changes whenever an outcome may have moved a pair to another band; rankings made
// under an older generation are recomputed by the next query that reads them.
var failGen atomic.Uint64

// pair is one endpoint towards one target: the unit that is ranked (O-5: per endpoint and
// target, the truer signal, since a path can fail for one resolver only) and the socket pool. Its
// endpoint hands it out to rankers and closes it when the last one lets go (endpoint.go).
type pair struct {
	ep  *Endpoint
	src netip.Addr
	dst netip.AddrPort
	up  *upstream

	dstStr string // for metrics and metadata, built once
	srcStr string

	*outcomes // shared across reloads, see outcomes.go
	key       outcomeKey
	refs      int // rankers holding the pair; guarded by ep.mu
	probing   atomic.Bool
}

func newPair(e *Endpoint, src netip.Addr, dst netip.AddrPort) *pair {
	k := outcomeKey{endpoint: e.Name, src: src, dst: dst}
	p := &pair{ep: e, src: src, dst: dst, up: &upstream{src: src, dst: dst}, key: k, outcomes: acquireOutcomes(k)}
	p.dstStr = dst.Addr().String()
	if dst.Port() != 53 {
		p.dstStr = dst.String()
	}
	if src.IsValid() {
		p.srcStr = src.String()
	}
	return p
}

// close gives back the sockets and the ranking state of a pair no ranker uses any more.
func (p *pair) close() {
	p.up.close()
	releaseOutcomes(p.key, p.outcomes)
}

// outcome is what one attempt or probe says about a path.
type outcome int

const (
	// success: a reply with any rcode but SERVFAIL and REFUSED (O-5: NXDOMAIN counts as success).
	success outcome = iota
	// failure: no reply in time, a network error, only garbage (O-10); for a probe, also an
	// error rcode to the fixed probe question.
	failure
	// errorRcode: SERVFAIL or REFUSED to a client's question. The reply proves the path carries
	// packets, and the error is most often about the name: neither success nor failure. The pair
	// is probed at the next round, whose fixed question decides (README, "Ranking").
	errorRcode
)

func isErrorRcode(rc int) bool { return rc == dns.RcodeServerFailure || rc == dns.RcodeRefused }

// decay ages the counts to now. Caller holds p.mu.
func (p *pair) decay(now time.Time) {
	if p.last.IsZero() {
		p.last = now
		return
	}
	dt := now.Sub(p.last)
	if dt <= 0 {
		return
	}
	d := math.Exp2(-float64(dt) / float64(halfLife.Load()))
	p.succ *= d
	p.tot *= d
	p.last = now
}

// record adds the outcome of one attempt. It reports whether the pair went down or came back up
// (a recovery).
func (p *pair) record(now time.Time, o outcome, rtt time.Duration) (wentDown, recovered bool) {
	p.mu.Lock()
	if o == errorRcode {
		p.due = true
		p.mu.Unlock()
		return false, false
	}
	p.decay(now)
	p.tot++
	p.due = false
	if o == success {
		p.consec = 0
		p.succ++
		s := rtt.Seconds()
		if p.lat == 0 {
			p.lat = s
		} else {
			p.lat += latAlpha * (s - p.lat)
		}
	} else {
		p.consec++
	}
	p.lastSample = now
	r := p.ratioLocked()
	switch {
	case !p.down && (r < downRatio || p.consec >= demoteAfter):
		p.down, wentDown = true, true
	case p.down && p.consec == 0 && r >= upRatio:
		p.down, recovered = false, true
	}
	p.mu.Unlock()
	if o == failure || wentDown || recovered {
		failGen.Add(1)
	}
	return wentDown, recovered
}

func (p *pair) ratioLocked() float64 {
	return (p.succ + priorWeight) / (p.tot + priorWeight)
}

// stats returns the success ratio at now, the smoothed latency (0: none yet), the time of the
// last outcome, the failures since the last success, and whether an error rcode asks for a probe.
func (p *pair) stats(now time.Time) (ratio, lat float64, last time.Time, consec int, due bool) {
	p.mu.Lock()
	p.decay(now)
	ratio, lat, last, consec, due = p.ratioLocked(), p.lat, p.lastSample, p.consec, p.due
	p.mu.Unlock()
	return ratio, lat, last, consec, due
}

// isDown reports the up/down state kept for metrics.
func (p *pair) isDown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down
}

// failBand is the success ratio class, 0 best.
func failBand(ratio float64) int {
	if ratio >= 1 {
		return 0
	}
	return int((1 - ratio) / failBandWidth)
}

// latBand is the latency class, 0 best; no data is -1 and is replaced by the best known band.
func latBand(lat float64) int {
	if lat <= 0 {
		return -1
	}
	ms := lat * 1000
	if ms <= 1 {
		return 0
	}
	return 1 + int(math.Log(ms)/math.Log(latBandBase))
}

// key is the score of one pair for one source region, compared field by field.
type key struct {
	fail int
	lat  int
	dist float64
	idx  int
}

func (a key) less(b key) bool {
	if a.fail != b.fail {
		return a.fail < b.fail
	}
	if a.lat != b.lat {
		return a.lat < b.lat
	}
	if a.dist != b.dist {
		return a.dist < b.dist
	}
	return a.idx < b.idx
}

// ranking is an order of a candidate set for one source region.
type ranking struct {
	order []int // indexes into the candidate set, best first
	at    time.Time
	gen   uint64
}

// ranker ranks one candidate set (the pairs of a zone's endpoints and targets) per source region.
type ranker struct {
	pairs   []*pair
	regions []region.ID // region of each pair's endpoint
	table   *region.Table
	now     func() time.Time
	health  []*health.Target // per pair, the board entry of its target; nil entries are unchecked
	from    region.ID        // the region whose rank it publishes (metrics.go)

	// refs counts its holders: its owner (the block, or an FQDN entry), the queries in flight
	// through it and the probes of its pairs. The last release gives back what it holds (free:
	// pairs, board entries, metric series), so nothing a query or probe records outlives it.
	refs atomic.Int32
	free func()

	byRegion []atomic.Pointer[ranking] // index: region ID + 1 (0 is region.None)
	mu       sync.Mutex                // serializes recomputation
}

func newRanker(pairs []*pair, regions []region.ID, t *region.Table, now func() time.Time) *ranker {
	return &ranker{pairs: pairs, regions: regions, table: t, now: now, byRegion: make([]atomic.Pointer[ranking], t.Len()+1)}
}

// acquire takes a reference on rk, unless it was already given back.
func (rk *ranker) acquire() bool {
	for {
		n := rk.refs.Load()
		if n <= 0 {
			return false
		}
		if rk.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release gives back a reference; the last one frees what rk holds.
func (rk *ranker) release() {
	if rk.refs.Add(-1) == 0 {
		rk.free()
	}
}

// order returns the ranking for queries from region from, recomputing it when an outcome may
// have changed it or when it is older than rerankEvery.
func (rk *ranker) order(from region.ID) *ranking {
	slot := &rk.byRegion[int(from)+1]
	cur := slot.Load()
	gen := failGen.Load()
	if cur != nil && cur.gen == gen && rk.now().Sub(cur.at) < rerankEvery {
		return cur
	}
	rk.mu.Lock()
	defer rk.mu.Unlock()
	if c := slot.Load(); c != cur && c != nil && c.gen == failGen.Load() {
		return c // someone else just did it
	}
	next := rk.compute(from, cur)
	next.gen = gen
	slot.Store(next)
	return next
}

// compute scores every pair (O-5): success band, then latency band, then distance of the
// pair's endpoint from the source region, then declaration order. The previous leader gets the
// hysteresis bonus.
func (rk *ranker) compute(from region.ID, prev *ranking) *ranking {
	now := rk.now()
	leader := -1
	if prev != nil && len(prev.order) > 0 {
		leader = prev.order[0]
	}
	keys := make([]key, len(rk.pairs))
	bestLat := math.MaxInt
	for i, p := range rk.pairs {
		ratio, lat, _, consec, _ := p.stats(now)
		if i == leader {
			ratio += leaderRatioBonus
			lat *= leaderLatFactor
		}
		keys[i] = key{fail: failBand(ratio), lat: latBand(lat), dist: rk.table.Distance(from, rk.regions[i]), idx: i}
		if consec >= demoteAfter {
			keys[i].fail += demotedOffset
		}
		if i < len(rk.health) && rk.health[i] != nil && rk.health[i].Checked() && !rk.health[i].Healthy() {
			keys[i].fail += demotedOffset
		}
		if keys[i].lat >= 0 && keys[i].lat < bestLat {
			bestLat = keys[i].lat
		}
	}
	if bestLat == math.MaxInt {
		bestLat = 0
	}
	for i := range keys {
		if keys[i].lat < 0 {
			// No latency data: tie with the best, so distance decides (cold start).
			keys[i].lat = bestLat
		}
	}
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return keys[order[a]].less(keys[order[b]]) })
	if leader >= 0 && order[0] == leader {
		// The bonus shields the leader from challengers better by less than a band, never from
		// one that is as good in both bands and nearer: distance does not fluctuate, so letting it
		// decide there cannot flap, and a recovered nearer endpoint is preferred again (O-6).
		raw := rk.rawKey(now, leader, keys)
		for pos, j := range order[1:] {
			k := keys[j]
			if k.fail > raw.fail {
				break
			}
			if k.fail == raw.fail && k.lat <= raw.lat && k.dist < raw.dist {
				copy(order[1:pos+2], order[:pos+1])
				order[0] = j
				break
			}
		}
	}
	return &ranking{order: order, at: now}
}

// rawKey is the key of the leader without its hysteresis bonus.
func (rk *ranker) rawKey(now time.Time, i int, keys []key) key {
	k := keys[i]
	ratio, lat, _, _, _ := rk.pairs[i].stats(now)
	k.fail += failBand(ratio) - failBand(ratio+leaderRatioBonus)
	if b := latBand(lat); b >= 0 {
		k.lat = b
	}
	return k
}
