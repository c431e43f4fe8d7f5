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

	"github.com/coredns/coredns/core/dnsserver"
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
	// defaultTimeout is the query's deadline: forward's too (2 attempts of 2 s per upstream), and
	// below the 5 s stub resolvers (glibc, dig) wait, so a client sees our SERVFAIL, not its own
	// timeout.
	defaultTimeout       = 4 * time.Second
	minTimeout           = 100 * time.Millisecond
	maxTimeout           = 60 * time.Second
	defaultMaxConcurrent = 1000
)

var (
	errLimit   = errors.New("outbound: too many concurrent queries")
	errStopped = errors.New("the block stopped (a reload)")
)

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
	probeQ        dns.Question // the fixed question of exploration probes (O-6)
	probeWire     []byte       // probeQ packed
	cfg           *dnsserver.Config
	server        string // the server block, for the status page

	now   func() time.Time
	board *health.Board

	servers   []string // `server` labels; the first labels the series the prober keeps
	endpoints []*Endpoint
	rk        *ranker // static targets; nil with an FQDN target
	fq        *fqdnCache
	lookup    func(context.Context, request.Request, string) (*dns.Msg, error) // nil: selfLookup
	series    []held                                                           // the series of its zones and endpoints
	inflight  atomic.Int64
	bound     bool // bind took what stop gives back

	stopc   chan struct{}
	wg      sync.WaitGroup
	workers *workers // serve the queries (worker.go)
	probes  probes
	started atomic.Bool

	Next plugin.Handler
}

// New returns an Outbound with the defaults.
func New() *Outbound {
	o := &Outbound{timeout: defaultTimeout, maxConcurrent: defaultMaxConcurrent, now: time.Now, board: health.Default}
	o.workers = newWorkers(o.serve)
	return o
}

// Name implements plugin.Handler.
func (o *Outbound) Name() string { return "outbound" }

// Zones returns the forwarded zones, for plugins of the same server block (routingpolicy refuses
// policies on them, DESIGN.md section 5). Names under an `except` are not forwarded: see Forwards.
func (o *Outbound) Zones() []string { return slices.Clone(o.zones) }

// Forwards reports whether a query for name would be forwarded: it is in a zone and not under an
// `except`.
func (o *Outbound) Forwards(name string) bool { return o.match(dns.CanonicalName(name)) != "" }

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

// ServeDNS implements plugin.Handler. The queries it forwards are served on a worker (worker.go).
func (o *Outbound) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if len(r.Question) != 1 {
		return plugin.NextOrFailure(o.Name(), o.Next, ctx, w, r)
	}
	zone := o.match(r.Question[0].Name)
	if zone == "" {
		return plugin.NextOrFailure(o.Name(), o.Next, ctx, w, r)
	}
	return o.workers.run(ctx, w, r, zone)
}

// serve forwards a query of ours, in zone (the one ServeDNS matched: it is not matched again).
func (o *Outbound) serve(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, zone string) (int, error) {
	state := request.Request{W: w, Req: r}
	server := metrics.WithServer(ctx)
	if o.maxConcurrent > 0 {
		n := o.inflight.Add(1)
		defer o.inflight.Add(-1)
		if n > o.maxConcurrent {
			zoneSeries.Use(func() { rejectCount.WithLabelValues(server, zone).Inc() }, server, zone)
			return dns.RcodeRefused, errLimit
		}
	}
	from, _ := o.loc.Locate(w.RemoteAddr(), r, false)

	// Deadlines and latencies are on the wall clock (sockets use it); o.now times the ranking.
	deadline := time.Now().Add(o.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}

	// The query holds its ranker until its last attempt has recorded its outcome (H-6).
	rk, code, err := o.rk, dns.ExtendedErrorCodeNetworkError, errStopped
	if o.fq != nil {
		rk, err = o.fqdnRanker(ctx, state, from)
		code = dns.ExtendedErrorCodeNoReachableAuthority
	} else if rk.acquire() {
		err = nil
	}
	if err != nil {
		zoneSeries.Use(func() { allFailedCount.WithLabelValues(server, zone).Inc() }, server, zone)
		return o.servfail(w, r, code, err)
	}
	defer rk.release()
	rank := rk.order(from)

	// Pack once; each send writes a fresh ID into the wire (O-10). EDNS0 is kept with our
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
	udp := state.Proto() == "udp"
	x := query{ctx: ctx, o: o, server: server, zone: zone, rk: rk, order: rank.order, q: r.Question[0], wire: wire,
		tcp: o.forceTCP || !udp, deadline: deadline}
	res := x.run()
	defer res.drain()
	if res.m == nil {
		allFailedCount.WithLabelValues(server, zone).Inc()
		return o.servfail(w, r, dns.ExtendedErrorCodeNetworkError, x.err())
	}
	if res.nth > 0 && !isErrorRcode(res.m.Rcode) {
		failoverCount.WithLabelValues(server, zone).Inc()
	}
	// O-10: the resolver's reply as received, rcode and EDE included, with the client's ID and,
	// for a header-only error reply, the client's question.
	m := res.m
	m.Id = r.Id
	if len(m.Question) == 0 {
		m.Question = r.Question
	}
	if udp && res.size > 512 && res.size > state.Size() {
		m.Truncate(state.Size())
	}
	if metadata.ValueFuncs(ctx) != nil {
		setMetadata(ctx, rk.pairs[res.i], 1+slices.Index(rank.order, res.i))
	}
	w.WriteMsg(m)
	return dns.RcodeSuccess, nil
}

var packPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// Texts of the errors outbound synthesizes: generic, since endpoints, addresses and OS errors are
// internal (O-10); the error returned for the log says what happened.
const (
	textNoAnswer  = "outbound: no resolver answered"
	textNoAddress = "outbound: the resolver name did not resolve"
)

// servfail answers SERVFAIL, when no resolver answered, with an Extended DNS Error (RFC 8914)
// when the query has EDNS0, and returns err for the errors plugin.
func (o *Outbound) servfail(w dns.ResponseWriter, r *dns.Msg, code uint16, err error) (int, error) {
	m := new(dns.Msg)
	m.SetRcode(r, dns.RcodeServerFailure)
	if opt := r.IsEdns0(); opt != nil {
		text := textNoAnswer
		if code == dns.ExtendedErrorCodeNoReachableAuthority {
			text = textNoAddress
		}
		m.SetEdns0(udpBufSize, opt.Do())
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_EDE{InfoCode: code, ExtraText: text})
	}
	w.WriteMsg(m)
	return dns.RcodeSuccess, fmt.Errorf("outbound: %w", err)
}

func setMetadata(ctx context.Context, p *pair, rank int) {
	metadata.SetValueFunc(ctx, "outbound/endpoint", func() string { return p.ep.Name })
	metadata.SetValueFunc(ctx, "outbound/source", func() string { return p.srcStr })
	metadata.SetValueFunc(ctx, "outbound/target", func() string { return p.dstStr })
	metadata.SetValueFunc(ctx, "outbound/rank", func() string { return strconv.Itoa(rank) })
}
