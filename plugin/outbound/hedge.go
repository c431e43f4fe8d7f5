package outbound

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/miekg/dns"
)

// O-6: a query tries the best pair; when that attempt's time is up, the next pair is tried while
// the first keeps listening (hedging), and the first well-formed answer wins. A failure without a
// reply moves on at once. A late answer is a success with its latency; an attempt still silent
// past its time when another one answers is a failure. The query tries at most maxAttempts pairs,
// never past its deadline.
const (
	// maxAttempts bounds the pairs tried for one query, so a query never walks 100 dead
	// endpoints: the deadline and this bound both stop it.
	maxAttempts = 4
	// An attempt's time: attemptFactor times the pair's smoothed latency, within
	// [attemptMin, attemptMax]. The last possible attempt listens until the query's deadline.
	attemptFactor = 4
	attemptMin    = 500 * time.Millisecond
	attemptMax    = 2 * time.Second
)

// query is one client query's attempts through the ranked pairs.
type query struct {
	ctx          context.Context // the client's: once it is done, nothing more is tried
	o            *Outbound
	server, zone string
	rk           *ranker
	order        []int
	q            dns.Question
	wire         []byte
	tcp          bool
	deadline     time.Time

	tried [maxAttempts]int // pair indexes, in the order they were tried
	n     int
	// Endpoints and targets of attempts without a reply in their time (timed out or failed):
	// suspect when the next pair is chosen, not for ranking.
	suspectEP  []*Endpoint
	suspectDst []netip.AddrPort
	rcodeDst   []netip.AddrPort // targets that answered SERVFAIL or REFUSED
	errReply   result           // the first of those replies: the client gets it if nothing better comes
	after      int              // attempts started after errReply came
	lastErr    error
}

// result is a reply of the query's nth attempt, through pair rk.pairs[i], size bytes on the wire.
type result struct {
	m      *dns.Msg
	i, nth int
	size   int

	cancelled []*attempt    // attempts still listening when the reply came
	done      chan *attempt // where they report once they have stopped
}

// drain waits for the cancelled attempts to stop and record their outcome: the caller answers the
// client first, and no attempt outlives the query.
func (r result) drain() {
	for range r.cancelled {
		<-r.done
	}
}

// run sends the query and returns the first good reply, else the first error reply (SERVFAIL,
// REFUSED) a resolver gave, else nil: no resolver answered. Attempts run one after the other in the
// caller's goroutine until one's time is up with another pair to try: then hedged takes over.
func (x *query) run() result {
	for x.canStart() {
		var a attempt
		x.begin(&a)
		a.err = a.send(a.hedge)
		if a.err == nil {
			a.err = a.wait(a.hedge)
			if a.err == errTimeout && time.Now().Before(x.deadline) {
				return x.hedged(&a)
			}
		}
		x.finish(&a)
		if x.settle(&a) {
			return x.result(&a)
		}
	}
	return x.errReply
}

// hedged runs the attempts that overlap: first keeps listening in its own goroutine while the
// next pair is tried, and so on at each attempt's time, until one answers or all are done.
func (x *query) hedged(first *attempt) result {
	h := new(query) // the goroutines share it; x stays on the caller's stack
	*h = *x
	defer func() { *x = *h }() // for x.err
	done := make(chan *attempt, maxAttempts)
	var pending []*attempt
	listen := func(a *attempt, send bool) {
		a.ctl = &attemptCtl{}
		a.wire = slices.Clone(a.wire) // the caller's buffer goes back to its pool on return
		pending = append(pending, a)
		go func() {
			if send {
				a.err = a.send(a.hedge)
			}
			if a.err == nil {
				a.err = a.wait(h.deadline)
			}
			h.finish(a)
			done <- a
		}()
	}
	a := new(attempt)
	*a = *first
	a.err = nil
	listen(a, false)
	timer := time.NewTimer(0) // the first attempt's time is up
	defer timer.Stop()
	// Every attempt that ends without the answer re-arms the timer, so a pair that may still be
	// tried is tried even when nothing is pending.
	stop := func(res result) result {
		for _, b := range pending {
			b.cancel()
		}
		res.cancelled, res.done = pending, done
		return res
	}
	for len(pending) > 0 || h.canStart() {
		select {
		case <-timer.C:
			if h.canStart() {
				now := time.Now()
				for _, b := range pending {
					if !now.Before(b.hedge) {
						h.suspect(b.p)
					}
				}
				a := new(attempt)
				h.begin(a)
				listen(a, true)
				timer.Reset(time.Until(a.hedge))
			}
		case a := <-done:
			pending = slices.DeleteFunc(pending, func(b *attempt) bool { return b == a })
			if h.settle(a) {
				return stop(h.result(a))
			}
			if h.errReply.m != nil && !h.canStart() && !slices.ContainsFunc(pending, func(b *attempt) bool { return !slices.Contains(h.rcodeDst, b.p.dst) }) {
				// The resolvers still listened to already said SERVFAIL or REFUSED about the
				// name, and nothing else may be tried: their error reply is the answer.
				return stop(h.errReply)
			}
			timer.Reset(0) // a failure, or an error rcode: the next pair may go now
		case <-h.ctx.Done():
			return stop(h.errReply)
		}
	}
	return h.errReply
}

// canStart reports whether another attempt may start: the client still waits, a pair is left, the
// bound and the deadline allow it.
func (x *query) canStart() bool {
	return x.ctx.Err() == nil && x.n < maxAttempts && x.next() >= 0 && time.Now().Before(x.deadline)
}

// next returns the pair to try next, or -1. After an attempt got no reply in its time, its endpoint
// and its target are suspect: the best-ranked pair not tried yet that differs from them in both is
// preferred, then one with another endpoint, then any (O-6: the next endpoint, not the same dead
// path to another target, nor another path to a frozen resolver). After an error rcode only one more
// pair is tried, towards another target: the same resolver would say the same about the name, and a
// fan-out through every endpoint would only load it (README, "Failover and hedging").
func (x *query) next() int {
	if x.errReply.m != nil && x.after > 0 {
		return -1
	}
	best, bestScore := -1, -1
	for _, i := range x.order {
		p := x.rk.pairs[i]
		if slices.Contains(x.tried[:x.n], i) || slices.Contains(x.rcodeDst, p.dst) {
			continue
		}
		score := 0
		if !slices.Contains(x.suspectEP, p.ep) {
			score = 1
			if !slices.Contains(x.suspectDst, p.dst) {
				score = 2
			}
		}
		if score == 2 || x.errReply.m != nil {
			return i
		}
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	return best
}

// suspect marks the endpoint and the target of p, whose attempt got no reply in its time.
func (x *query) suspect(p *pair) {
	if !slices.Contains(x.suspectEP, p.ep) {
		x.suspectEP = append(x.suspectEP, p.ep)
	}
	if !slices.Contains(x.suspectDst, p.dst) {
		x.suspectDst = append(x.suspectDst, p.dst)
	}
}

// begin prepares attempt a through the next pair.
func (x *query) begin(a *attempt) {
	i := x.next()
	x.tried[x.n] = i
	x.n++
	if x.errReply.m != nil {
		x.after++
	}
	p := x.rk.pairs[i]
	now := time.Now()
	*a = attempt{p: p, i: i, nth: x.n - 1, q: x.q, wire: x.wire, tcp: x.tcp, start: now, hedge: x.deadline}
	if t := now.Add(attemptTime(p)); x.canStart() && t.Before(x.deadline) {
		a.hedge = t
	}
}

// attemptTime is how long an attempt through p listens before the next pair may be tried.
func attemptTime(p *pair) time.Duration {
	p.mu.Lock()
	lat := p.lat
	p.mu.Unlock()
	d := time.Duration(lat * attemptFactor * float64(time.Second))
	return min(max(d, attemptMin), attemptMax)
}

// finish records what the attempt says about its pair (O-5) and its metrics, and gives back its
// socket. It runs in the goroutine that ran the attempt.
func (x *query) finish(a *attempt) {
	now := time.Now()
	a.close()
	o, rc := failure, "error"
	switch {
	case a.m != nil:
		o, rc = success, rcodeString(a.m.Rcode)
		if isErrorRcode(a.m.Rcode) {
			o = errorRcode
		}
	case errors.Is(a.err, errCancelled):
		// Another attempt answered first. Still within its time, this one says nothing about
		// its path; past it, its path failed to answer in time.
		rc = "timeout"
		if now.Before(a.hedge) {
			rc = "cancelled"
		}
	case errors.Is(a.err, errTimeout):
		rc = "timeout"
	}
	p := a.p
	requestCount.WithLabelValues(x.server, x.zone, p.ep.Name, p.dstStr, rc).Inc()
	requestDuration.WithLabelValues(x.server, x.zone, p.ep.Name).Observe(now.Sub(a.start).Seconds())
	// A socket pool closed under us says nothing about the path. (The query holds its ranker,
	// so its pairs stay open until it ends; this guards the ranking state all the same.)
	if rc == "cancelled" || errors.Is(a.err, errClosed) {
		return
	}
	if _, recovered := p.record(x.o.now(), o, now.Sub(a.start)); recovered {
		recoveryCount.WithLabelValues(x.server, x.zone, p.ep.Name, p.dstStr).Inc()
	}
}

// settle takes in a finished attempt and reports whether its reply is the query's answer.
func (x *query) settle(a *attempt) bool {
	switch {
	case a.m != nil && !isErrorRcode(a.m.Rcode):
		return true
	case a.m != nil:
		x.rcodeDst = append(x.rcodeDst, a.p.dst)
		if x.errReply.m == nil {
			x.errReply = x.result(a)
		}
	default:
		x.suspect(a.p)
		x.lastErr = fmt.Errorf("endpoint %s to %s: %w", a.p.ep.Name, a.p.dstStr, a.err)
	}
	return false
}

func (x *query) result(a *attempt) result {
	return result{m: a.m, i: a.i, nth: a.nth, size: a.n}
}

// err says, for the log, why no resolver answered.
func (x *query) err() error {
	if err := x.ctx.Err(); err != nil {
		return fmt.Errorf("the client went away after %d attempts: %w", x.n, err)
	}
	if x.lastErr == nil {
		return errors.New("no time left before the deadline")
	}
	return fmt.Errorf("all %d attempts failed, last: %w", x.n, x.lastErr)
}
