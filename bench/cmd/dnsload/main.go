// Command dnsload sends DNS queries over UDP at a fixed rate for a fixed time and counts, in time buckets,
// the answers, the failures (SERVFAIL, REFUSED, other error rcodes) and the timeouts. It is the load generator
// of bench case 4 (failover under load): at -at after the start it runs -exec (for example `kill -STOP PID`
// to make the preferred upstream go silent) and reports how many queries failed afterwards and how long it
// took until the failure rate stayed below -steady.
//
// bench/soak and bench/overload read the per-bucket counts it writes with -json: there a failure is split
// further into REFUSED and SERVFAIL, so a server that sheds load (REFUSED) is told apart from one that fails.
//
// It only talks to loopback addresses (127.0.0.0/8) and stops by itself after -duration plus -timeout.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

type options struct {
	server   string
	source   string
	names    string
	qps      int
	duration time.Duration
	timeout  time.Duration
	bucket   time.Duration
	sockets  int
	at       time.Duration
	execCmd  string
	steady   float64
	jsonOut  string
}

func main() {
	var o options
	flag.StringVar(&o.server, "server", "127.0.0.1:53", "server ADDR:PORT (loopback only)")
	flag.StringVar(&o.source, "source", "", "local address to send from (loopback only; empty: any)")
	flag.StringVar(&o.names, "names", "", "file of `NAME TYPE` lines (dnsperf format); default www.example. A")
	flag.IntVar(&o.qps, "qps", 1000, "queries per second (1-100000)")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "how long to send (at most 24h)")
	flag.DurationVar(&o.timeout, "timeout", 2*time.Second, "a query without an answer after this long is a timeout")
	flag.DurationVar(&o.bucket, "bucket", 100*time.Millisecond, "width of a time bucket")
	flag.IntVar(&o.sockets, "sockets", 16, "UDP sockets to spread the queries over (1-1024)")
	flag.DurationVar(&o.at, "at", 0, "run -exec this long after the start (0: never)")
	flag.StringVar(&o.execCmd, "exec", "", "shell command to run at -at")
	flag.Float64Var(&o.steady, "steady", 0.01, "steady state: every later bucket fails at most this fraction")
	flag.StringVar(&o.jsonOut, "json", "", "write the per-bucket counts as JSON to this file")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "dnsload:", err)
		os.Exit(1)
	}
}

func (o options) validate() error {
	ap, err := netip.ParseAddrPort(o.server)
	if err != nil {
		return fmt.Errorf("-server %q is not ADDR:PORT: %v", o.server, err)
	}
	if !ap.Addr().IsLoopback() {
		return fmt.Errorf("-server %q is not a loopback address (only 127.0.0.0/8 and ::1 are allowed)", o.server)
	}
	if o.source != "" {
		a, err := netip.ParseAddr(o.source)
		if err != nil || !a.IsLoopback() {
			return fmt.Errorf("-source %q is not a loopback address (only 127.0.0.0/8 and ::1 are allowed)", o.source)
		}
	}
	switch {
	case o.qps < 1 || o.qps > 100000:
		return fmt.Errorf("-qps %d is out of range (allowed 1-100000)", o.qps)
	case o.duration <= 0 || o.duration > 24*time.Hour:
		return fmt.Errorf("-duration %s is out of range (allowed >0 to 24h)", o.duration)
	case o.timeout <= 0 || o.timeout > time.Minute:
		return fmt.Errorf("-timeout %s is out of range (allowed >0 to 1m)", o.timeout)
	case o.bucket < time.Millisecond:
		return fmt.Errorf("-bucket %s is below the minimum of 1ms", o.bucket)
	case o.sockets < 1 || o.sockets > 1024:
		return fmt.Errorf("-sockets %d is out of range (allowed 1-1024)", o.sockets)
	case o.at < 0 || o.at > o.duration:
		return fmt.Errorf("-at %s is out of range (allowed 0 to -duration %s)", o.at, o.duration)
	case o.steady < 0 || o.steady > 1:
		return fmt.Errorf("-steady %v is out of range (allowed 0-1)", o.steady)
	}
	return nil
}

// Bucket counts the queries sent during one time bucket by their outcome.
type Bucket struct {
	Sent    int `json:"sent"`
	OK      int `json:"ok"`      // NOERROR or NXDOMAIN
	Failed  int `json:"failed"`  // any other rcode (SERVFAIL, REFUSED, ...) or a send error
	Timeout int `json:"timeout"` // no answer within -timeout

	// Of Failed, the answers with these rcodes.
	Refused  int `json:"refused"`
	Servfail int `json:"servfail"`
}

func (b Bucket) bad() int { return b.Failed + b.Timeout }

type pending struct {
	at     time.Time
	bucket int
}

type sock struct {
	conn    *net.UDPConn
	mu      sync.Mutex
	id      uint16
	pending map[uint16]pending
}

// counter holds every bucket and the latencies of the answered queries.
type counter struct {
	mu      sync.Mutex
	buckets []Bucket
	lat     []time.Duration
}

func (c *counter) add(i int, f func(*Bucket)) {
	c.mu.Lock()
	if i >= 0 && i < len(c.buckets) {
		f(&c.buckets[i])
	}
	c.mu.Unlock()
}

func readNames(path string) ([]dns.Question, error) {
	if path == "" {
		return []dns.Question{{Name: "www.example.", Qtype: dns.TypeA, Qclass: dns.ClassINET}}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var qs []dns.Question
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 || strings.HasPrefix(fs[0], "#") {
			continue
		}
		qt := dns.TypeA
		if len(fs) > 1 {
			t, ok := dns.StringToType[strings.ToUpper(fs[1])]
			if !ok {
				return nil, fmt.Errorf("%s: unknown type %q (allowed: DNS type names such as A, AAAA, TXT)", path, fs[1])
			}
			qt = t
		}
		qs = append(qs, dns.Question{Name: dns.Fqdn(fs[0]), Qtype: qt, Qclass: dns.ClassINET})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(qs) == 0 {
		return nil, fmt.Errorf("%s: no queries", path)
	}
	return qs, nil
}

func run(o options) error {
	if err := o.validate(); err != nil {
		return err
	}
	qs, err := readNames(o.names)
	if err != nil {
		return err
	}
	raddr := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(o.server))
	var laddr *net.UDPAddr
	if o.source != "" {
		laddr = &net.UDPAddr{IP: net.ParseIP(o.source)}
	}
	nb := int((o.duration + o.bucket - 1) / o.bucket)
	c := &counter{buckets: make([]Bucket, nb)}
	socks := make([]*sock, o.sockets)
	for i := range socks {
		conn, err := net.DialUDP("udp", laddr, raddr)
		if err != nil {
			for _, s := range socks[:i] {
				s.conn.Close()
			}
			return err
		}
		socks[i] = &sock{conn: conn, id: uint16(i * 4099), pending: map[uint16]pending{}}
	}

	start := time.Now()
	var wg sync.WaitGroup
	for _, s := range socks {
		wg.Go(func() { receive(s, c, o) })
	}
	ctx, cancel := context.WithCancel(context.Background())
	sweepDone := make(chan struct{})
	go func() { defer close(sweepDone); sweep(ctx, socks, c, o.timeout) }()

	var execErr error
	var execWg sync.WaitGroup
	if o.at > 0 && o.execCmd != "" {
		execWg.Go(func() {
			t := time.NewTimer(time.Until(start.Add(o.at)))
			defer t.Stop()
			<-t.C
			out, err := exec.Command("/bin/sh", "-c", o.execCmd).CombinedOutput() //nolint:gosec // -exec is the operator's own command, by design
			if err != nil {
				execErr = fmt.Errorf("-exec %q: %v: %s", o.execCmd, err, out)
			}
		})
	}

	send(socks, qs, c, start, o)
	execWg.Wait()
	// Give the last queries their full timeout, then close the sockets so the receivers return.
	time.Sleep(o.timeout + 100*time.Millisecond)
	cancel()
	<-sweepDone
	for _, s := range socks {
		s.mu.Lock()
		for id, p := range s.pending {
			c.add(p.bucket, func(b *Bucket) { b.Timeout++ })
			delete(s.pending, id)
		}
		s.mu.Unlock()
		s.conn.Close()
	}
	wg.Wait()
	report(os.Stdout, c, o)
	if o.jsonOut != "" {
		b, _ := json.Marshal(c.buckets)
		if err := os.WriteFile(o.jsonOut, b, 0o600); err != nil {
			return err
		}
	}
	return execErr
}

// send paces the queries: every millisecond it sends what the rate owes by then.
func send(socks []*sock, qs []dns.Question, c *counter, start time.Time, o options) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	sent, qi, si := 0, 0, 0
	m := new(dns.Msg)
	buf := make([]byte, 0, 512)
	for {
		el := time.Since(start)
		if el >= o.duration {
			return
		}
		owed := int(el.Seconds() * float64(o.qps))
		for ; sent < owed; sent++ {
			s := socks[si]
			si = (si + 1) % len(socks)
			q := qs[qi]
			qi = (qi + 1) % len(qs)
			now := time.Now()
			bi := int(now.Sub(start) / o.bucket)
			s.mu.Lock()
			s.id++
			id := s.id
			s.pending[id] = pending{at: now, bucket: bi}
			s.mu.Unlock()
			m.Id = id
			m.RecursionDesired = true
			m.Question = []dns.Question{q}
			wire, err := m.PackBuffer(buf)
			c.add(bi, func(b *Bucket) { b.Sent++ })
			if err == nil {
				_, err = s.conn.Write(wire)
			}
			if err != nil {
				// A send error (e.g. ICMP port unreachable reported on this socket) is a failed query.
				s.mu.Lock()
				delete(s.pending, id)
				s.mu.Unlock()
				c.add(bi, func(b *Bucket) { b.Failed++ })
			}
		}
		<-tick.C
	}
}

func receive(s *sock, c *counter, o options) {
	buf := make([]byte, 65535)
	m := new(dns.Msg)
	for {
		n, err := s.conn.Read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // ICMP errors surface here on connected sockets; the query then times out.
		}
		now := time.Now()
		if m.Unpack(buf[:n]) != nil {
			continue
		}
		s.mu.Lock()
		p, ok := s.pending[m.Id]
		if ok {
			delete(s.pending, m.Id)
		}
		s.mu.Unlock()
		if !ok {
			continue // late answer of a query already counted as a timeout
		}
		switch {
		case now.Sub(p.at) > o.timeout:
			// Answered, but after the client gave up (the sweeper runs every 50 ms).
			c.add(p.bucket, func(b *Bucket) { b.Timeout++ })
		case m.Rcode == dns.RcodeSuccess || m.Rcode == dns.RcodeNameError:
			c.mu.Lock()
			if p.bucket < len(c.buckets) {
				c.buckets[p.bucket].OK++
			}
			c.lat = append(c.lat, now.Sub(p.at))
			c.mu.Unlock()
		default:
			rc := m.Rcode
			c.add(p.bucket, func(b *Bucket) {
				b.Failed++
				switch rc {
				case dns.RcodeRefused:
					b.Refused++
				case dns.RcodeServerFailure:
					b.Servfail++
				}
			})
		}
	}
}

// sweep turns queries older than the timeout into timeouts, every 50 ms.
func sweep(ctx context.Context, socks []*sock, c *counter, timeout time.Duration) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for _, s := range socks {
				s.mu.Lock()
				for id, p := range s.pending {
					if now.Sub(p.at) > timeout {
						delete(s.pending, id)
						c.add(p.bucket, func(b *Bucket) { b.Timeout++ })
					}
				}
				s.mu.Unlock()
			}
		}
	}
}

// Summary is what report prints, one key=value per field.
type Summary struct {
	Sent, OK, Failed, Timeout int
	FailedAfter               int           // failed + timed out among queries sent at or after -at
	Steady                    time.Duration // from -at to the start of the first bucket after which every bucket is steady; -1 if never
	P50, P99, P999            time.Duration
}

func summarize(buckets []Bucket, lat []time.Duration, bucket, at time.Duration, steady float64) Summary {
	var s Summary
	ab := int(at / bucket)
	for i, b := range buckets {
		s.Sent += b.Sent
		s.OK += b.OK
		s.Failed += b.Failed
		s.Timeout += b.Timeout
		if i >= ab {
			s.FailedAfter += b.bad()
		}
	}
	// The last bucket that is not steady; steady state starts after it.
	last := -1
	for i := ab; i < len(buckets); i++ {
		b := buckets[i]
		if b.Sent > 0 && float64(b.bad()) > steady*float64(b.Sent) {
			last = i
		}
	}
	switch {
	case last == len(buckets)-1:
		s.Steady = -1
	case last < ab:
		s.Steady = 0
	default:
		s.Steady = time.Duration(last+1)*bucket - at
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
		s.P50, s.P99, s.P999 = q(0.50), q(0.99), q(0.999)
	}
	return s
}

func report(w *os.File, c *counter, o options) {
	s := summarize(c.buckets, c.lat, o.bucket, o.at, o.steady)
	steady := "-1" // never steady within the run
	if s.Steady >= 0 {
		steady = fmt.Sprintf("%.2f", s.Steady.Seconds())
	}
	fmt.Fprintf(w, "sent=%d ok=%d failed=%d timeout=%d failed_after=%d steady_s=%s p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f\n",
		s.Sent, s.OK, s.Failed, s.Timeout, s.FailedAfter, steady,
		ms(s.P50), ms(s.P99), ms(s.P999))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
