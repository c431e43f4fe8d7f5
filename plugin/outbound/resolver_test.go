package outbound

import (
	"encoding/binary"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Modes of a test resolver.
const (
	modeAnswer        = iota // NOERROR with an A record (NXDOMAIN for names starting with "nx.")
	modeServfail             // SERVFAIL
	modeRefused              // REFUSED
	modeSilent               // no reply at all
	modeTruncate             // TC over UDP, full answer over TCP
	modeGarbage              // wrong ID, then wrong question, then garbage, then nothing
	modeSpoofed              // wrong ID, wrong question and garbage first, then the right answer
	modeHeaderRefused        // REFUSED with the right ID and no question section
	modeServfailEDE          // SERVFAIL with Extended DNS Error 6 (DNSSEC Bogus)
	modeBig                  // an answer of 40 A records, larger than 512 bytes, even over UDP without EDNS0
	modeWrongID              // the answer with a wrong ID only
	modeWrongQuestion        // the right ID with another question, then the right answer
	modeBadBytes             // 3 bytes, then 30 bytes that start with the query's ID and do not parse
)

// resolver is a small DNS server on a loopback address that records the source address of every
// client query, answers according to its mode and can be slowed down. The outbound probes (the
// zone apex SOA by default, O-6) that a running server sends to pairs nobody used yet, from its
// first tick on, are counted in queries but not in clients or sources: a test that counts what
// its own queries did does not depend on whether it ran past the first tick.
type resolver struct {
	addr    string
	udp     *dns.Server
	tcp     *dns.Server
	mode    atomic.Int32
	delay   atomic.Int64
	answer  net.IP
	queries atomic.Int64 // every query, probes included
	clients atomic.Int64 // queries other than SOA: the clients' (the tests ask no SOA but as probes)
	quiet   atomic.Bool  // do not record sources and IDs (benchmarks)
	tcpIdle atomic.Int64 // how long an idle TCP connection is kept; 0: miekg/dns's 8 s
	// TCP connections accepted and closed by the resolver.
	accepted, closed atomic.Int64

	mu         sync.Mutex
	sources    map[netip.Addr]int // client queries (not SOA) per source
	names      map[string]int     // queries per question name, lower case
	ids        []uint16
	dropped    map[netip.Addr]bool
	slow       map[netip.Addr]time.Duration // extra delay per source
	onQuery    func(*dns.Msg)               // called under mu
	refuse     string                       // names with this prefix are refused
	refuseFrom netip.Addr                   // every query from this source is refused
}

// drop makes the resolver ignore queries from src, as if the endpoint's path were cut.
func (r *resolver) drop(src netip.Addr) {
	r.mu.Lock()
	r.dropped[src] = true
	r.mu.Unlock()
}

// refuseNames makes the resolver refuse the names that start with prefix.
func (r *resolver) refuseNames(prefix string) {
	r.mu.Lock()
	r.refuse = prefix
	r.mu.Unlock()
}

// refuseSource makes the resolver refuse every query from src, as an ACL would.
func (r *resolver) refuseSource(src netip.Addr) {
	r.mu.Lock()
	r.refuseFrom = src
	r.mu.Unlock()
}

// slowDown delays the answers to queries from src by d.
func (r *resolver) slowDown(src netip.Addr, d time.Duration) {
	r.mu.Lock()
	r.slow[src] = d
	r.mu.Unlock()
}

func (r *resolver) undrop(src netip.Addr) {
	r.mu.Lock()
	delete(r.dropped, src)
	r.mu.Unlock()
}

// startResolver starts a resolver on ip (a 127.x.y.z address) at a free port shared by UDP and TCP.
func startResolver(tb testing.TB, ip string) *resolver {
	tb.Helper()
	return startResolverPort(tb, ip, "0")
}

// startResolverPort starts a resolver on ip:port (port "0": a free one).
func startResolverPort(tb testing.TB, ip, port string) *resolver {
	tb.Helper()
	r := &resolver{sources: map[netip.Addr]int{}, names: map[string]int{}, dropped: map[netip.Addr]bool{}, slow: map[netip.Addr]time.Duration{}, answer: net.ParseIP("192.0.2.1")}
	var pc net.PacketConn
	var l net.Listener
	var err error
	for range 20 {
		pc, err = net.ListenPacket("udp", net.JoinHostPort(ip, port))
		if err != nil {
			tb.Fatal(err)
		}
		l, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			break
		}
		pc.Close()
	}
	if err != nil {
		tb.Fatal(err)
	}
	r.addr = pc.LocalAddr().String()
	r.udp = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(r.serve)}
	r.tcp = &dns.Server{Listener: countingListener{l, r}, Handler: dns.HandlerFunc(r.serve), IdleTimeout: func() time.Duration {
		if d := time.Duration(r.tcpIdle.Load()); d > 0 {
			return d
		}
		return 8 * time.Second
	}}
	var wg sync.WaitGroup
	wg.Add(2)
	r.udp.NotifyStartedFunc = wg.Done
	r.tcp.NotifyStartedFunc = wg.Done
	go r.udp.ActivateAndServe()
	go r.tcp.ActivateAndServe()
	wg.Wait()
	tb.Cleanup(func() {
		r.udp.Shutdown()
		r.tcp.Shutdown()
	})
	return r
}

// countingListener counts the TCP connections the resolver accepts and closes.
type countingListener struct {
	net.Listener
	r *resolver
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.r.accepted.Add(1)
	return &countingConn{Conn: c, r: l.r}, nil
}

type countingConn struct {
	net.Conn
	r    *resolver
	once sync.Once
}

func (c *countingConn) Close() error {
	c.once.Do(func() { c.r.closed.Add(1) })
	return c.Conn.Close()
}

// asked returns how many queries for name the resolver received.
func (r *resolver) asked(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.names[strings.ToLower(name)]
}

func (r *resolver) port() string {
	_, p, _ := net.SplitHostPort(r.addr)
	return p
}

func (r *resolver) setMode(m int)            { r.mode.Store(int32(m)) }
func (r *resolver) setDelay(d time.Duration) { r.delay.Store(int64(d)) }
func (r *resolver) count(src string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sources[netip.MustParseAddr(src)]
}

func (r *resolver) sourceSet() map[netip.Addr]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[netip.Addr]int{}
	maps.Copy(out, r.sources)
	return out
}

func (r *resolver) serve(w dns.ResponseWriter, q *dns.Msg) {
	r.queries.Add(1)
	if r.quiet.Load() {
		m := new(dns.Msg)
		m.SetReply(q)
		r.fill(m, q)
		w.WriteMsg(m)
		return
	}
	ap, _ := netip.ParseAddrPort(w.RemoteAddr().String())
	r.mu.Lock()
	if r.dropped[ap.Addr().Unmap()] {
		r.mu.Unlock()
		return
	}
	if len(q.Question) != 1 || q.Question[0].Qtype != dns.TypeSOA {
		r.sources[ap.Addr().Unmap()]++
		r.clients.Add(1)
	}
	if len(q.Question) == 1 {
		r.names[strings.ToLower(q.Question[0].Name)]++
	}
	r.ids = append(r.ids, q.Id)
	refuse := r.refuse != "" && len(q.Question) == 1 && strings.HasPrefix(q.Question[0].Name, r.refuse) || r.refuseFrom == ap.Addr().Unmap()
	if r.onQuery != nil {
		r.onQuery(q)
	}
	slow := r.slow[ap.Addr().Unmap()]
	r.mu.Unlock()
	if slow > 0 {
		time.Sleep(slow)
	}
	if d := time.Duration(r.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	_, isTCP := w.RemoteAddr().(*net.TCPAddr)
	m := new(dns.Msg)
	m.SetReply(q)
	if refuse {
		m.Rcode = dns.RcodeRefused
		w.WriteMsg(m)
		return
	}
	switch r.mode.Load() {
	case modeSilent:
		return
	case modeHeaderRefused:
		h := new(dns.Msg)
		h.Id, h.Response, h.Rcode, h.RecursionDesired = q.Id, true, dns.RcodeRefused, q.RecursionDesired
		w.WriteMsg(h)
		return
	case modeServfailEDE:
		m.Rcode = dns.RcodeServerFailure
		m.SetEdns0(1232, false)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeDNSBogus, ExtraText: "signature expired"})
		w.WriteMsg(m)
		return
	case modeBig:
		for i := range 40 {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.IPv4(192, 0, 2, byte(i+1))})
		}
		w.WriteMsg(m) // as is: no truncation, whatever the client's buffer
		return
	case modeWrongID:
		r.fill(m, q)
		m.Id = q.Id + 1
		w.WriteMsg(m)
		return
	case modeWrongQuestion:
		bad := m.Copy()
		bad.Question[0].Name = "other.example."
		w.WriteMsg(bad)
		r.fill(m, q)
	case modeBadBytes:
		w.Write([]byte{1, 2, 3})
		junk := make([]byte, 30)
		binary.BigEndian.PutUint16(junk, q.Id)
		junk[2], junk[5] = 0x80, 0x09 // a response claiming 9 questions it does not carry
		w.Write(junk)
		return
	case modeServfail:
		m.Rcode = dns.RcodeServerFailure
	case modeRefused:
		m.Rcode = dns.RcodeRefused
	case modeTruncate:
		if !isTCP {
			m.Truncated = true
			break
		}
		r.fill(m, q)
	case modeGarbage, modeSpoofed:
		bad := m.Copy()
		bad.Id = q.Id + 1
		r.fill(bad, q)
		w.WriteMsg(bad)
		bad2 := m.Copy()
		bad2.Question[0].Name = "other.example."
		w.WriteMsg(bad2)
		w.Write([]byte{1, 2, 3})
		if r.mode.Load() == modeGarbage {
			return
		}
		r.fill(m, q)
	default:
		r.fill(m, q)
	}
	if o := q.IsEdns0(); o != nil {
		m.SetEdns0(o.UDPSize(), o.Do())
	}
	w.WriteMsg(m)
}

func (r *resolver) fill(m, q *dns.Msg) {
	name := q.Question[0].Name
	if len(name) > 3 && name[:3] == "nx." {
		m.Rcode = dns.RcodeNameError
		return
	}
	if q.Question[0].Qtype == dns.TypeA {
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: r.answer})
	}
}

// startRawResolver answers each UDP query on 127.0.0.50 with what reply builds from it.
func startRawResolver(t *testing.T, reply func(q []byte) []byte) string {
	t.Helper()
	addrs, _ := rawResolvers(t, 1, time.Now, reply)
	return addrs[0]
}

// rawResolvers starts n UDP listeners on 127.0.0.50 that answer each datagram with reply (nil:
// silence) and record when each one came, on clock, per listener.
func rawResolvers(t *testing.T, n int, clock func() time.Time, reply func(q []byte) []byte) (targets []string, got func() [][]time.Time) {
	t.Helper()
	var mu sync.Mutex
	times := make([][]time.Time, n)
	for i := range n {
		pc, err := net.ListenPacket("udp", "127.0.0.50:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		targets = append(targets, pc.LocalAddr().String())
		go func() {
			buf := make([]byte, 512)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				mu.Lock()
				times[i] = append(times[i], clock())
				mu.Unlock()
				if b := reply(buf[:n]); b != nil {
					pc.WriteTo(b, from)
				}
			}
		}()
	}
	return targets, func() [][]time.Time {
		mu.Lock()
		defer mu.Unlock()
		out := make([][]time.Time, n)
		for i := range times {
			out[i] = slices.Clone(times[i])
		}
		return out
	}
}

// bigReply is an answer of 40 A records to q.
func bigReply(q *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(q)
	for i := range 40 {
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.IPv4(192, 0, 2, byte(i+1))})
	}
	return m
}
