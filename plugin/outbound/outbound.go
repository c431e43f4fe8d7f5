// Package outbound forwards zones to private resolvers through ranked egress endpoints, each
// with its own source addresses (docs/DESIGN.md of the repository, section 6: O-1 to O-10).
package outbound

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metadata"
	"github.com/coredns/coredns/plugin/metrics"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/coredns/coredns/request"
	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/region"

	"github.com/miekg/dns"
)

var log = clog.NewWithPlugin("outbound")

const (
	defaultTimeout       = 5 * time.Second
	minTimeout           = 100 * time.Millisecond
	maxTimeout           = 60 * time.Second
	defaultMaxConcurrent = 1000
	// maxAttempts bounds the endpoints tried for one query, so a query never walks 100 dead
	// endpoints: the deadline and this bound both stop it.
	maxAttempts = 4
	// Per-attempt timeout: attemptFactor times the pair's smoothed latency, within
	// [attemptMin, attemptMax], and never past the query's deadline. The last attempt gets all
	// the time left.
	attemptFactor = 4
	attemptMin    = 500 * time.Millisecond
	attemptMax    = 2 * time.Second
)

var errLimit = errors.New("outbound: too many concurrent queries")

// Outbound is the handler of one outbound block.
type Outbound struct {
	zones         []string
	except        []string
	targets       []netip.AddrPort
	fqdn          string
	fqdnPort      uint16
	private       []netip.Prefix
	endpointNames []string
	declared      []*Endpoint
	sourceAddress netip.Addr
	locCfg        region.Config
	loc           *region.Locator
	timeout       time.Duration
	forceTCP      bool
	maxConcurrent int64

	now   func() time.Time
	board *health.Board

	endpoints []*Endpoint
	rk        *ranker // static targets; nil with an FQDN target
	fq        *fqdnCache
	lookup    func(context.Context, request.Request, string) (*dns.Msg, error) // nil: selfLookup
	held      map[netip.Addr]*health.Target                                    // P-4: targets whose health a destination publishes
	lastQ     atomic.Pointer[dns.Question]
	inflight  atomic.Int64

	stopc   chan struct{}
	wg      sync.WaitGroup
	started atomic.Bool

	Next plugin.Handler
}

// New returns an Outbound with the defaults.
func New() *Outbound {
	return &Outbound{timeout: defaultTimeout, maxConcurrent: defaultMaxConcurrent, now: time.Now, board: health.Default}
}

// Name implements plugin.Handler.
func (o *Outbound) Name() string { return "outbound" }

// Zones returns the forwarded zones, for plugins of the same server block (routingpolicy refuses
// policies on them, DESIGN.md section 5). Names under an `except` are not forwarded: see Forwards.
func (o *Outbound) Zones() []string { return slices.Clone(o.zones) }

// Forwards reports whether a query for name would be forwarded: it is in a zone and not under an
// `except`.
func (o *Outbound) Forwards(name string) bool { return o.match(dns.CanonicalName(name)) != "" }

// bind resolves the endpoint names against the instance's registry (O-9) and their sources
// against this host (O-2). Without endpoints the zone uses one default endpoint whose source is
// source_address, or the kernel's choice.
func (o *Outbound) bind(reg *registry) error {
	o.endpoints = o.endpoints[:0]
	for _, n := range o.endpointNames {
		e := reg.lookup(n)
		if e == nil {
			return fmt.Errorf("endpoint %q is named but declared nowhere (declare it with endpoint %s REGION SOURCE...)", n, n)
		}
		if _, err := o.loc.Table.Resolve(e.Region); err != nil {
			return fmt.Errorf("endpoint %s: %w", n, err)
		}
		if err := e.resolve(interfaceAddrs); err != nil {
			return err
		}
		o.endpoints = append(o.endpoints, e)
	}
	if len(o.endpoints) == 0 {
		e := &Endpoint{Name: "default", Region: o.loc.Table.Name(o.loc.Server())}
		if o.sourceAddress.IsValid() {
			e.Sources = []netip.Prefix{netip.PrefixFrom(o.sourceAddress, 32)}
		}
		if err := e.resolve(interfaceAddrs); err != nil {
			return err
		}
		reg.mu.Lock()
		reg.byName["\x00default/"+o.zones[0]+fmt.Sprintf("%p", o)] = e // closed with the others
		reg.mu.Unlock()
		o.endpoints = append(o.endpoints, e)
	}
	if o.fqdn == "" {
		// P-4: a target that is a pschealth destination (or any published virtual IP) carries
		// its composite state; an unhealthy one is ranked below every healthy one.
		o.held = make(map[netip.Addr]*health.Target, len(o.targets))
		for _, t := range o.targets {
			if _, ok := o.held[t.Addr()]; !ok {
				o.held[t.Addr()] = o.board.Acquire(health.Key{Addr: t.Addr()})
			}
		}
		o.rk = o.newRanker(o.targets, o.held)
	} else {
		o.fq = newFQDNCache(o.loc.Table.Len())
	}
	return nil
}

// newRanker builds the candidate set of every endpoint towards every target.
// held gives the board entry of each target address (P-4); a missing one is unchecked.
func (o *Outbound) newRanker(targets []netip.AddrPort, held map[netip.Addr]*health.Target) *ranker {
	pairs := make([]*pair, 0, len(o.endpoints)*len(targets))
	regions := make([]region.ID, 0, cap(pairs))
	health := make([]*health.Target, 0, cap(pairs))
	for _, e := range o.endpoints {
		id, ok := o.loc.Table.Lookup(e.Region)
		if !ok {
			id = region.None
		}
		for _, t := range targets {
			pairs = append(pairs, e.pair(t))
			regions = append(regions, id)
			health = append(health, held[t.Addr()])
		}
	}
	rk := newRanker(pairs, regions, o.loc.Table, o.now)
	rk.health = health
	return rk
}

func (o *Outbound) start() error {
	o.stopc = make(chan struct{})
	o.wg.Add(1)
	go o.exploreLoop(o.stopc)
	o.started.Store(true)
	return nil
}

func (o *Outbound) stop() {
	o.started.Store(false)
	if o.stopc != nil {
		close(o.stopc)
		o.wg.Wait()
		o.stopc = nil
	}
	for a, t := range o.held {
		o.board.Release(t)
		delete(o.held, a)
	}
	if o.fq != nil {
		for i := range o.fq.slots {
			if e := o.fq.slots[i].Swap(nil); e != nil {
				o.releaseHeld(e.held)
			}
		}
	}
}

// match returns the longest of our zones that name is in, or "" when the query is not ours. It
// does not allocate (plugin.Zones.Matches splits names into labels).
func (o *Outbound) match(name string) string {
	zone := ""
	for _, z := range o.zones {
		if len(z) > len(zone) && subdomain(z, name) {
			zone = z
		}
	}
	if zone == "" {
		return ""
	}
	for _, ex := range o.except {
		if subdomain(ex, name) {
			return ""
		}
	}
	return zone
}

// subdomain reports whether name is zone or below it; both are fully qualified, case is ignored.
func subdomain(zone, name string) bool {
	if zone == "." {
		return true
	}
	if len(name) < len(zone) || !strings.EqualFold(name[len(name)-len(zone):], zone) {
		return false
	}
	return len(name) == len(zone) || name[len(name)-len(zone)-1] == '.'
}

type selfLookupKey struct{}

// ServeDNS implements plugin.Handler.
func (o *Outbound) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if len(r.Question) != 1 {
		return plugin.NextOrFailure(o.Name(), o.Next, ctx, w, r)
	}
	state := request.Request{W: w, Req: r}
	zone := o.match(r.Question[0].Name)
	if zone == "" {
		return plugin.NextOrFailure(o.Name(), o.Next, ctx, w, r)
	}
	server := metrics.WithServer(ctx)
	if o.maxConcurrent > 0 {
		n := o.inflight.Add(1)
		defer o.inflight.Add(-1)
		if n > o.maxConcurrent {
			refusedCount.WithLabelValues(server, zone).Inc()
			return dns.RcodeRefused, errLimit
		}
	}
	q := r.Question[0]
	if o.lastQ.Load() == nil {
		first := q
		o.lastQ.Store(&first)
	}
	from, _ := o.loc.Locate(w.RemoteAddr(), r, false)

	// Deadlines and latencies are on the wall clock (sockets use it); o.now times the ranking.
	deadline := time.Now().Add(o.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}

	rk := o.rk
	if o.fq != nil {
		var err error
		rk, err = o.fqdnRanker(ctx, state, from)
		if err != nil {
			allFailedCount.WithLabelValues(server, zone).Inc()
			return o.servfail(w, r, dns.ExtendedErrorCodeNoReachableAuthority, err)
		}
	}
	rank := rk.order(from)

	// Pack once; each attempt writes a fresh ID into the wire (O-10). EDNS0 is kept with our
	// buffer size of 1232 towards the resolver.
	bp := packPool.Get().(*[]byte)
	defer packPool.Put(bp)
	opt := r.IsEdns0()
	var oldSize uint16
	if opt != nil {
		oldSize = opt.UDPSize()
		opt.SetUDPSize(udpBufSize)
	}
	wire, err := r.PackBuffer(*bp)
	if opt != nil {
		opt.SetUDPSize(oldSize)
	}
	if err != nil {
		return dns.RcodeFormatError, err
	}
	tcp := o.forceTCP || state.Proto() == "tcp"

	var (
		lastErr  error
		tried    [maxAttempts]int
		nTried   int
		failedEP [maxAttempts]*Endpoint
	)
	for nTried < maxAttempts && nTried < len(rank.order) {
		now := time.Now()
		if !now.Before(deadline) {
			break
		}
		i := pick(rank.order, rk.pairs, tried[:nTried], failedEP[:nTried])
		p := rk.pairs[i]
		tried[nTried] = i
		nTried++

		last := nTried == maxAttempts || nTried == len(rank.order)
		adl := attemptDeadline(p, now, deadline, last)
		m, n, usedTCP, err := p.up.exchange(wire, q, tcp, adl)
		rtt := time.Since(now)
		rc := "timeout"
		ok := false
		if err == nil {
			ok = m.Rcode != dns.RcodeServerFailure && m.Rcode != dns.RcodeRefused
			rc = rcodeString(m.Rcode)
		} else if !errors.Is(err, errTimeout) {
			rc = "error"
		}
		requestCount.WithLabelValues(server, zone, p.ep.Name, p.dstStr, rc).Inc()
		requestDuration.WithLabelValues(server, zone, p.ep.Name).Observe(rtt.Seconds())
		// A socket pool closed under us (this instance is shutting down after a reload) says
		// nothing about the path: the outcome is not recorded, since ranking state outlives us.
		if !errors.Is(err, errClosed) {
			if _, recovered := p.record(o.now(), ok, rtt); recovered {
				recoveryCount.WithLabelValues(p.ep.Name, p.dstStr).Inc()
			}
		}
		if !ok {
			failedEP[nTried-1] = p.ep
			if err != nil {
				lastErr = fmt.Errorf("endpoint %s to %s: %w", p.ep.Name, p.dstStr, err)
			} else {
				lastErr = fmt.Errorf("endpoint %s to %s: %s", p.ep.Name, p.dstStr, rc)
			}
			continue
		}
		if nTried > 1 {
			failoverCount.WithLabelValues(server, zone).Inc()
		}
		m.Id = r.Id
		if (usedTCP || n > 512) && state.Proto() == "udp" && n > state.Size() {
			m.Truncate(state.Size())
		}
		if metadata.ValueFuncs(ctx) != nil {
			setMetadata(ctx, p, 1+indexOf(rank.order, i))
		}
		w.WriteMsg(m)
		return dns.RcodeSuccess, nil
	}
	allFailedCount.WithLabelValues(server, zone).Inc()
	if lastErr == nil {
		lastErr = errors.New("no time left before the deadline")
	}
	return o.servfail(w, r, dns.ExtendedErrorCodeNetworkError, fmt.Errorf("all %d attempts failed, last: %w", nTried, lastErr))
}

var packPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// pick returns the best-ranked candidate not tried yet, preferring one whose endpoint has not
// failed in this query (O-6: the next endpoint, not the same dead path to another target).
func pick(order []int, pairs []*pair, tried []int, failed []*Endpoint) int {
	first := -1
	for _, i := range order {
		if contains(tried, i) {
			continue
		}
		if first < 0 {
			first = i
		}
		if !slices.Contains(failed, pairs[i].ep) {
			return i
		}
	}
	return first
}

func indexOf(s []int, x int) int {
	for k, y := range s {
		if y == x {
			return k
		}
	}
	return -1
}

func contains(s []int, x int) bool {
	return slices.Contains(s, x)
}

// attemptDeadline gives one attempt its share of the query's deadline.
func attemptDeadline(p *pair, now, deadline time.Time, last bool) time.Time {
	if last {
		return deadline
	}
	p.mu.Lock()
	lat := p.lat
	p.mu.Unlock()
	d := time.Duration(lat * attemptFactor * float64(time.Second))
	d = min(max(d, attemptMin), attemptMax)
	if t := now.Add(d); t.Before(deadline) {
		return t
	}
	return deadline
}

// servfail answers SERVFAIL with an Extended DNS Error (RFC 8914) that says why, when the query
// has EDNS0, and returns err for the errors plugin.
func (o *Outbound) servfail(w dns.ResponseWriter, r *dns.Msg, code uint16, err error) (int, error) {
	m := new(dns.Msg)
	m.SetRcode(r, dns.RcodeServerFailure)
	if opt := r.IsEdns0(); opt != nil {
		m.SetEdns0(udpBufSize, opt.Do())
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_EDE{InfoCode: code, ExtraText: "outbound: " + err.Error()})
	}
	w.WriteMsg(m)
	return dns.RcodeSuccess, fmt.Errorf("outbound: %w", err)
}

func setMetadata(ctx context.Context, p *pair, rank int) {
	metadata.SetValueFunc(ctx, "outbound/endpoint", func() string { return p.ep.Name })
	metadata.SetValueFunc(ctx, "outbound/source", func() string { return p.srcStr })
	metadata.SetValueFunc(ctx, "outbound/target", func() string { return p.dstStr })
	metadata.SetValueFunc(ctx, "outbound/rank", func() string { return rankString(rank) })
}

func rankString(n int) string {
	if n < len(smallInts) {
		return smallInts[n]
	}
	return strconv.Itoa(n)
}

var smallInts = []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}

func rcodeString(rc int) string {
	if s, ok := dns.RcodeToString[rc]; ok {
		return s
	}
	return strconv.Itoa(rc)
}
