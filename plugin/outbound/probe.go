package outbound

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Exploration (O-6): a demoted pair is re-tested by probes sent through its own source, outside
// client traffic, so a client never waits on a path that is still dead. Every exploreEvery, each
// pair whose last outcome was a failure, whose success ratio is below band 0 (so a recovered pair
// earns back its ratio), or which answered a client with SERVFAIL or REFUSED, and each pair nobody
// used for staleAfter (so latency data exists for every pair, O-5), gets one probe, however many
// they are: all at once, each within probeTimeout. A probe asks the fixed probe question (`probe`,
// default the zone apex SOA), which the resolver is expected to answer: SERVFAIL or REFUSED to it
// is a failure of the path.
const (
	exploreEvery = time.Second
	staleAfter   = 30 * time.Second
	probeTimeout = time.Second
)

func (o *Outbound) exploreLoop(stop <-chan struct{}) {
	defer o.wg.Done()
	t := time.NewTicker(exploreEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			o.explore(stop)
		}
	}
}

// explore sends this round's probes, waits for them (a shutdown cuts them short) and publishes
// the rank and up gauges. Tests call it directly with a fake clock.
func (o *Outbound) explore(stop <-chan struct{}) {
	now := o.now()
	m := new(dns.Msg)
	m.SetQuestion(o.probeQ.Name, o.probeQ.Qtype)
	m.SetEdns0(udpBufSize, false)
	wire, err := m.Pack()
	if err != nil {
		return
	}
	if o.fq != nil {
		o.fq.prune(now)
	}
	var (
		wg     sync.WaitGroup
		probes []*attempt
		seen   = map[*pair]bool{}
	)
	rks := o.rankers() // held until the probes have recorded their outcome
	defer releaseRankers(rks)
	for _, rk := range rks {
		for _, p := range rk.pairs {
			if seen[p] {
				continue
			}
			seen[p] = true
			ratio, _, last, consec, due := p.stats(now)
			if !due && consec == 0 && failBand(ratio) == 0 && !last.IsZero() && now.Sub(last) < staleAfter {
				continue
			}
			if !p.probing.CompareAndSwap(false, true) {
				continue // another zone sharing this endpoint probes it
			}
			a := &attempt{p: p, q: o.probeQ, wire: slices.Clone(wire), tcp: o.forceTCP, ctl: &attemptCtl{}}
			probes = append(probes, a)
			wg.Go(func() {
				defer p.probing.Store(false)
				o.probe(a)
			})
		}
	}
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		close(finished)
	}()
	select {
	case <-finished:
	case <-stop:
		for _, a := range probes {
			a.cancel()
		}
		<-finished
	}
	o.publish()
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
