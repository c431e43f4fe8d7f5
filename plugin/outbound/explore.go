package outbound

import (
	"errors"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Exploration (O-6): a demoted pair is re-tested by probes sent through its own source, outside
// client traffic, so a client never waits on a path that is still dead. Every exploreEvery, each
// pair whose last outcome was a failure or whose success ratio is below band 0 (so a recovered
// pair earns back its ratio), and each pair nobody used for staleAfter (so latency data exists
// for every pair, O-5), gets one probe: the first question this zone forwarded, or the zone's
// SOA. At most maxProbes probes run per tick, each within probeTimeout.
const (
	exploreEvery = time.Second
	staleAfter   = 30 * time.Second
	maxProbes    = 8
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
			o.explore()
		}
	}
}

// candidates returns every pair this zone may use now.
func (o *Outbound) candidates() []*pair {
	if o.rk != nil {
		return o.rk.pairs
	}
	if o.fq == nil {
		return nil
	}
	var out []*pair
	seen := map[*pair]bool{}
	for i := range o.fq.slots {
		if e := o.fq.slots[i].Load(); e != nil {
			for _, p := range e.rk.pairs {
				if !seen[p] {
					seen[p] = true
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// explore sends this tick's probes and waits for them. Tests call it directly with a fake clock.
func (o *Outbound) explore() {
	now := o.now()
	q := o.probeQuestion()
	m := new(dns.Msg)
	m.SetQuestion(q.Name, q.Qtype)
	m.Question[0].Qclass = q.Qclass
	m.SetEdns0(udpBufSize, false)
	wire, err := m.Pack()
	if err != nil {
		return
	}
	var wg sync.WaitGroup
	n := 0
	for _, p := range o.candidates() {
		if n >= maxProbes {
			break
		}
		ratio, _, last, consec := p.stats(now)
		if consec == 0 && failBand(ratio) == 0 && !last.IsZero() && now.Sub(last) < staleAfter {
			continue
		}
		if !p.probing.CompareAndSwap(false, true) {
			continue // another zone sharing this endpoint probes it
		}
		n++
		wg.Add(1)
		w := append([]byte(nil), wire...)
		go func(p *pair) {
			defer wg.Done()
			defer p.probing.Store(false)
			start := time.Now()
			r, _, _, err := p.up.exchange(w, q, o.forceTCP, time.Now().Add(min(probeTimeout, o.timeout)))
			ok := err == nil && r.Rcode != dns.RcodeServerFailure && r.Rcode != dns.RcodeRefused
			probeCount.WithLabelValues(p.ep.Name, p.dstStr, boolString(ok)).Inc()
			if errors.Is(err, errClosed) {
				return
			}
			if _, recovered := p.record(o.now(), ok, time.Since(start)); recovered {
				recoveryCount.WithLabelValues(p.ep.Name, p.dstStr).Inc()
			}
		}(p)
	}
	wg.Wait()
	o.publishRanks()
}

func (o *Outbound) probeQuestion() dns.Question {
	if q := o.lastQ.Load(); q != nil {
		return *q
	}
	return dns.Question{Name: o.zones[0], Qtype: dns.TypeSOA, Qclass: dns.ClassINET}
}

// publishRanks sets the rank and up/down gauges for the server's own region.
func (o *Outbound) publishRanks() {
	if o.rk == nil {
		return
	}
	from := o.loc.Server()
	rank := o.rk.order(from)
	regionName := o.loc.Table.Name(from)
	for pos, i := range rank.order {
		p := o.rk.pairs[i]
		for _, z := range o.zones {
			rankGauge.WithLabelValues(z, regionName, p.ep.Name, p.dstStr).Set(float64(pos + 1))
		}
		up := 1.0
		if p.isDown() {
			up = 0
		}
		upGauge.WithLabelValues(p.ep.Name, p.dstStr).Set(up)
	}
}

func boolString(b bool) string {
	if b {
		return "success"
	}
	return "failure"
}
