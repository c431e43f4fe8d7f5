package outbound

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Exploration (O-6): a demoted pair is re-tested by probes sent through its own source, outside
// client traffic, so a client never waits on a path that is still dead. A pair needs probing when
// its last outcome was a failure, its success ratio is below band 0 (so a recovered pair earns back
// its ratio), it answered a client with SERVFAIL or REFUSED, or nobody used it for staleAfter (so
// latency data exists for every pair, O-5). Such a pair is probed about every exploreEvery: each
// probe sets the pair's next probe time a period ahead, with jitter, so pairs that went down
// together spread over the period. At most probeCap probes are in flight per block, each within
// probeTimeout; the prober looks for due pairs every exploreTick and starts the most overdue first,
// so however many pairs are dead, each is probed in turn: within its period while the due pairs
// fit in the cap, and every ceil(due / probeCap) timeouts when more than that are silent. A probe
// asks the fixed probe question (`probe`, default the zone apex SOA), which the resolver is
// expected to answer: SERVFAIL or REFUSED to it is a failure of the path.
const (
	exploreEvery = time.Second
	exploreTick  = exploreEvery / 10
	probeJitter  = 0.1 // the period varies by up to this share either way
	probeCap     = 64
	staleAfter   = 30 * time.Second
	probeTimeout = time.Second
)

// probes are the probes of one block in flight.
type probes struct {
	mu   sync.Mutex
	live map[*attempt]bool
	wg   sync.WaitGroup
}

func (o *Outbound) exploreLoop(stop <-chan struct{}) {
	defer o.wg.Done()
	t := time.NewTicker(exploreTick)
	defer t.Stop()
	for tick := 1; ; tick++ {
		select {
		case <-stop:
			return
		case <-t.C:
			o.explore()
			if tick%int(exploreEvery/exploreTick) == 0 {
				o.publish()
			}
		}
	}
}

// explore gives back expired FQDN entries and starts the probes that are due, up to probeCap in
// flight, the most overdue first. It does not wait for them. Tests call it directly with a fake
// clock.
func (o *Outbound) explore() {
	now := o.now()
	if o.fq != nil {
		o.fq.prune(now)
	}
	type due struct {
		p  *pair
		rk *ranker
		at time.Time
	}
	var (
		cands []due
		seen  = map[*pair]bool{}
	)
	rks := o.rankers()
	defer releaseRankers(rks)
	for _, rk := range rks {
		for _, p := range rk.pairs {
			if seen[p] || p.probing.Load() {
				continue
			}
			seen[p] = true
			if at, ok := p.probeDue(now); ok {
				cands = append(cands, due{p, rk, at})
			}
		}
	}
	slices.SortStableFunc(cands, func(a, b due) int { return a.at.Compare(b.at) })
	o.probes.mu.Lock()
	defer o.probes.mu.Unlock()
	if o.probes.live == nil {
		o.probes.live = make(map[*attempt]bool)
	}
	for _, c := range cands {
		if len(o.probes.live) >= probeCap {
			break
		}
		if !c.p.probing.CompareAndSwap(false, true) {
			continue // another zone sharing this endpoint probes it
		}
		c.rk.acquire() // explore holds it: this cannot fail
		c.p.probed(now)
		a := &attempt{p: c.p, q: o.probeQ, wire: slices.Clone(o.probeWire), tcp: o.forceTCP, ctl: &attemptCtl{}}
		o.probes.live[a] = true
		o.probes.wg.Go(func() {
			o.probe(a)
			c.p.probing.Store(false)
			c.rk.release()
			o.probes.mu.Lock()
			delete(o.probes.live, a)
			o.probes.mu.Unlock()
		})
	}
}

// stopProbes cancels the probes in flight and waits for them.
func (o *Outbound) stopProbes() {
	o.probes.mu.Lock()
	for a := range o.probes.live {
		a.cancel()
	}
	o.probes.mu.Unlock()
	o.probes.wg.Wait()
}

// probeDue reports whether p needs a probe at now, and since when it is due.
func (p *pair) probeDue(now time.Time) (time.Time, bool) {
	ratio, _, last, consec, due := p.stats(now)
	if !due && consec == 0 && failBand(ratio) == 0 && !last.IsZero() && now.Sub(last) < staleAfter {
		return time.Time{}, false
	}
	p.mu.Lock()
	next := p.nextProbe
	p.mu.Unlock()
	return next, !now.Before(next)
}

// probed sets the next probe time of p, a period from now with jitter.
func (p *pair) probed(now time.Time) {
	d := time.Duration(float64(exploreEvery) * (1 + probeJitter*(2*rand.Float64()-1))) //nolint:gosec // jitter, not a secret
	p.mu.Lock()
	p.nextProbe = now.Add(d)
	p.mu.Unlock()
}

// probeMsg packs the probe question.
func probeMsg(q dns.Question) ([]byte, error) {
	m := new(dns.Msg)
	m.SetQuestion(q.Name, q.Qtype)
	m.SetEdns0(udpBufSize, false)
	return m.Pack()
}

// probe sends one probe and records its outcome.
func (o *Outbound) probe(a *attempt) {
	a.start = time.Now()
	deadline := a.start.Add(min(probeTimeout, o.timeout))
	if a.err = a.send(deadline); a.err == nil {
		a.err = a.wait(deadline)
	}
	a.close()
	if errors.Is(a.err, errClosed) || errors.Is(a.err, errCancelled) {
		return
	}
	res := success
	if a.err != nil || isErrorRcode(a.m.Rcode) {
		res = failure
	}
	p := a.p
	probeCount.WithLabelValues(o.servers[0], o.zones[0], p.ep.Name, p.dstStr, resultString[res]).Inc()
	if _, recovered := p.record(o.now(), res, time.Since(a.start)); recovered {
		recoveryCount.WithLabelValues(o.servers[0], o.zones[0], p.ep.Name, p.dstStr).Inc()
	}
}

var resultString = map[outcome]string{success: "success", failure: "failure"}
