package test

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
)

// Helpers of the outbound scenarios (scenario_outbound_test.go). Every name starts with "ob":
// other scenario files share this package.

// obSeen is one query as a test resolver received it.
type obSeen struct {
	name    string     // the question name, lower case
	src     netip.Addr // the source address the query came from
	dropped bool       // the resolver stayed silent (the source's path was cut)
}

// obResolver is a resolver on a 127.x.y.z address: it records the source address of every query,
// answers A queries with its own answer address, and can go silent for chosen source addresses,
// as if the path from an egress endpoint were cut.
type obResolver struct {
	ip     string
	addr   string // ip:port
	answer net.IP
	udp    *dns.Server
	tcp    *dns.Server

	mu     sync.Mutex
	seen   []obSeen
	silent map[netip.Addr]bool
	delay  map[netip.Addr]time.Duration
}

// obStartResolvers starts one resolver on each ip, all on the same port (so one FQDN target with
// one port can name any of them). The i-th resolver answers 192.0.2.(i+1).
func obStartResolvers(t *testing.T, ips ...string) []*obResolver {
	t.Helper()
	var lastErr error
	for range 20 {
		rs, err := obTryResolvers(ips)
		if err == nil {
			t.Cleanup(func() {
				for _, r := range rs {
					r.stop()
				}
			})
			return rs
		}
		lastErr = err
	}
	t.Fatalf("starting resolvers on %v: %v", ips, lastErr)
	return nil
}

func obTryResolvers(ips []string) ([]*obResolver, error) {
	port := "0"
	var rs []*obResolver
	for i, ip := range ips {
		r, err := obListen(ip, port, net.IPv4(192, 0, 2, byte(i+1)))
		if err != nil {
			for _, r := range rs {
				r.stop()
			}
			return nil, err
		}
		_, port, _ = net.SplitHostPort(r.addr)
		rs = append(rs, r)
	}
	return rs, nil
}

func obListen(ip, port string, answer net.IP) (*obResolver, error) {
	pc, err := net.ListenPacket("udp", net.JoinHostPort(ip, port))
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", pc.LocalAddr().String())
	if err != nil {
		pc.Close()
		return nil, err
	}
	r := &obResolver{ip: ip, addr: pc.LocalAddr().String(), answer: answer, silent: map[netip.Addr]bool{}, delay: map[netip.Addr]time.Duration{}}
	r.udp = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(r.serve)}
	r.tcp = &dns.Server{Listener: l, Handler: dns.HandlerFunc(r.serve)}
	var wg sync.WaitGroup
	wg.Add(2)
	r.udp.NotifyStartedFunc = wg.Done
	r.tcp.NotifyStartedFunc = wg.Done
	go func() { _ = r.udp.ActivateAndServe() }()
	go func() { _ = r.tcp.ActivateAndServe() }()
	wg.Wait()
	return r, nil
}

func (r *obResolver) stop() {
	_ = r.udp.Shutdown()
	_ = r.tcp.Shutdown()
}

// port is the resolver's port.
func (r *obResolver) port() string {
	_, p, _ := net.SplitHostPort(r.addr)
	return p
}

func (r *obResolver) serve(w dns.ResponseWriter, q *dns.Msg) {
	if len(q.Question) != 1 {
		return
	}
	ap, _ := netip.ParseAddrPort(w.RemoteAddr().String())
	src := ap.Addr().Unmap()
	name := strings.ToLower(q.Question[0].Name)
	r.mu.Lock()
	drop, delay := r.silent[src], r.delay[src]
	r.seen = append(r.seen, obSeen{name: name, src: src, dropped: drop})
	r.mu.Unlock()
	if drop {
		return
	}
	if delay > 0 {
		time.Sleep(delay) // the path's round trip, not a wait for anything
	}
	m := new(dns.Msg)
	m.SetReply(q)
	if q.Question[0].Qtype == dns.TypeA {
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: r.answer})
	}
	if o := q.IsEdns0(); o != nil {
		m.SetEdns0(o.UDPSize(), o.Do())
	}
	_ = w.WriteMsg(m)
}

// silence makes the resolver drop every query from src; restore answers them again.
func (r *obResolver) silence(src string) {
	r.mu.Lock()
	r.silent[netip.MustParseAddr(src)] = true
	r.mu.Unlock()
}

func (r *obResolver) restore(src string) {
	r.mu.Lock()
	delete(r.silent, netip.MustParseAddr(src))
	r.mu.Unlock()
}

// slow delays every answer to src by d: a path to a farther region.
func (r *obResolver) slow(src string, d time.Duration) {
	r.mu.Lock()
	r.delay[netip.MustParseAddr(src)] = d
	r.mu.Unlock()
}

// log returns a copy of every query received so far, in arrival order.
func (r *obResolver) log() []obSeen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]obSeen(nil), r.seen...)
}

// sources counts, per source address, the queries whose name starts with prefix.
func (r *obResolver) sources(prefix string) map[string]int {
	out := map[string]int{}
	for _, s := range r.log() {
		if strings.HasPrefix(s.name, prefix) {
			out[s.src.String()]++
		}
	}
	return out
}

// obCorefile fills the {KEY} placeholders of a Corefile template.
func obCorefile(tmpl string, kv ...string) string {
	for i := 0; i+1 < len(kv); i += 2 {
		tmpl = strings.ReplaceAll(tmpl, "{"+kv[i]+"}", kv[i+1])
	}
	return tmpl
}

// obAsk sends one A query for name from the client address from and returns the answer.
func obAsk(s *coretest.Server, from, name string, timeout time.Duration) (*dns.Msg, time.Duration, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	m.SetEdns0(1232, false)
	c := &dns.Client{Timeout: timeout, Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(from)}}}
	start := time.Now()
	r, _, err := c.Exchange(m, s.UDP)
	return r, time.Since(start), err
}

// obMustA queries name from the client address from and fails the test unless the answer is
// NOERROR with the single A record want.
func obMustA(t *testing.T, s *coretest.Server, from, name, want string) {
	t.Helper()
	r, _, err := obAsk(s, from, name, 5*time.Second)
	if err != nil {
		t.Fatalf("query %s from %s: %v", name, from, err)
	}
	if got := obAddrs(r); r.Rcode != dns.RcodeSuccess || got != want {
		t.Fatalf("query %s from %s: %s %s, want NOERROR %s", name, from, dns.RcodeToString[r.Rcode], got, want)
	}
}

// obAddrs lists the A records of an answer, comma separated.
func obAddrs(m *dns.Msg) string {
	var out []string
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	return strings.Join(out, ",")
}

// obEventually polls cond every 20 ms until it holds or the deadline passes.
func obEventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// obResult is the outcome of one query of the load.
type obResult struct {
	name  string
	rcode int
	addrs string
	took  time.Duration
	err   error
}

// obLoad is a steady load: workers clients on one address, each sending one query at a time
// with a unique name (prefix-W-N.zone) and pausing pace between queries, until stop or
// maxDuration, whichever comes first.
type obLoad struct {
	done    chan struct{}
	wg      sync.WaitGroup
	sent    atomic.Int64
	mu      sync.Mutex
	results []obResult
}

func obStartLoad(s *coretest.Server, from, prefix, zone string, workers int, pace, maxDuration time.Duration) *obLoad {
	l := &obLoad{done: make(chan struct{})}
	end := time.Now().Add(maxDuration)
	for w := range workers {
		l.wg.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				select {
				case <-l.done:
					return
				default:
				}
				name := fmt.Sprintf("%s-%d-%d.%s", prefix, w, i, zone)
				r, took, err := obAsk(s, from, name, 5*time.Second)
				res := obResult{name: name, took: took, err: err, rcode: -1}
				if err == nil {
					res.rcode, res.addrs = r.Rcode, obAddrs(r)
				}
				l.sent.Add(1)
				l.mu.Lock()
				l.results = append(l.results, res)
				l.mu.Unlock()
				select {
				case <-l.done:
					return
				case <-time.After(pace):
				}
			}
		})
	}
	return l
}

// stop ends the load, waits for the queries in flight and returns every result.
func (l *obLoad) stop() []obResult {
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]obResult(nil), l.results...)
}
