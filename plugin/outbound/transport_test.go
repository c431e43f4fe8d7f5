package outbound

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
)

// O-10 (issue 13, problem 2): a REFUSED with the right ID and no question section (legal, and
// common for errors) is the resolver's answer: the client gets REFUSED at once, with its question,
// not SERVFAIL after the deadline.
func TestHeaderOnlyReplyIsAnAnswer(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	r.setMode(modeHeaderRefused)
	o := newHandler(t, "outbound example. {\nto "+r.addr+"\nprivate 127.0.0.0/8\ntimeout 2s\n}")
	m := new(dns.Msg)
	m.SetQuestion("h.example.", dns.TypeA)
	start := time.Now()
	a := serve(t, o, m)
	if a.Rcode != dns.RcodeRefused || len(a.Question) != 1 || a.Question[0].Name != "h.example." {
		t.Errorf("O-10: header-only REFUSED reached the client as %v", a)
	}
	if took := time.Since(start); took >= time.Second {
		t.Errorf("O-10: took %v: the reply was dropped and the deadline waited for", took)
	}
}

// O-10 (issue 13, problem 3): a pooled TCP connection that the resolver closed while it sat idle
// is replaced and the query sent again, as pkg/proxy does on ErrCachedClosed: the client gets its
// answer, the resolver the query once, and the path is not charged a failure.
func TestPooledTCPClosedByResolverRedialled(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	r.tcpIdle.Store(int64(100 * time.Millisecond))
	o := newHandler(t, "outbound example. {\nto "+r.addr+"\nprivate 127.0.0.0/8\nforce_tcp\ntimeout 2s\n}")
	m := new(dns.Msg)
	m.SetQuestion("first.example.", dns.TypeA)
	if a := serve(t, o, m); a.Rcode != dns.RcodeSuccess {
		t.Fatalf("first query: %s", dns.RcodeToString[a.Rcode])
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.accepted.Load() == 0 || r.closed.Load() < r.accepted.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the resolver did not close its idle connection")
		}
		time.Sleep(10 * time.Millisecond)
	}
	m.SetQuestion("second.example.", dns.TypeA)
	if a := serve(t, o, m); a.Rcode != dns.RcodeSuccess || len(a.Answer) != 1 {
		t.Fatalf("O-10: a pooled connection closed by the resolver failed the query: %v", a)
	}
	if n := r.asked("second.example."); n != 1 {
		t.Errorf("the resolver got the query %d times", n)
	}
	if _, _, _, consec, _ := o.rk.pairs[0].stats(time.Now()); consec != 0 {
		t.Errorf("a stale pooled connection was charged as %d path failures", consec)
	}
}

// O-10: a TCP reply cut by the attempt's time resumes where it stopped when the attempt keeps
// listening (hedging), instead of losing the stream's framing.
func TestTCPReadResumes(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	r.setMode(modeBig)
	o := newHandler(t, "outbound example. {\nto "+r.addr+"\nprivate 127.0.0.0/8\nforce_tcp\n}")
	p := o.rk.pairs[0]
	m := new(dns.Msg)
	m.SetQuestion("big.example.", dns.TypeA)
	wire, _ := m.Pack()
	a := attempt{p: p, q: m.Question[0], wire: wire, tcp: true}
	defer a.close()
	if err := a.send(time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	// Read the length prefix and a few bytes only, as a deadline in the middle would.
	a.buf = bufPool.Get().(*[]byte)
	if _, err := io.ReadFull(a.c.c, (*a.buf)[:2]); err != nil {
		t.Fatal(err)
	}
	a.size = int(binary.BigEndian.Uint16(*a.buf))
	if _, err := io.ReadFull(a.c.c, (*a.buf)[:3]); err != nil {
		t.Fatal(err)
	}
	a.got = 5
	if err := a.wait(time.Now().Add(time.Second)); err != nil || len(a.m.Answer) != 40 {
		t.Fatalf("resumed read: %v, %v", err, a.m)
	}
}

// O-10: a header-only reply (no question) with the right ID is an answer only with an error rcode.
// A header-only NOERROR (no question, no answer, no SOA) is not taken: the wait goes on, and with
// nothing else coming the client gets outbound's SERVFAIL at the deadline, never a NOERROR/NODATA
// the resolver did not say (forward answers FORMERR to it, request.Match). Was: match took any
// reply with the right ID and no question, whatever its rcode, so the client got a cacheable NODATA.
func TestO10HeaderOnlyNoErrorIsNotAnAnswer(t *testing.T) {
	addr := startRawResolver(t, func(q []byte) []byte {
		h := make([]byte, 12)
		copy(h, q[:2])
		h[2] = 0x81 // QR, RD; opcode QUERY; rcode NOERROR; all counts 0
		h[3] = 0x80 // RA
		return h
	})
	o := newHandler(t, "outbound example. {\nto "+addr+"\nprivate 127.0.0.0/8\ntimeout 1s\n}")
	m := new(dns.Msg)
	m.SetQuestion("h.example.", dns.TypeA)
	a := serveAny(o, m)
	if a.Rcode == dns.RcodeSuccess {
		t.Errorf("O-10: a header-only NOERROR reply (no question) reached the client as NOERROR with %d answers: a NODATA the resolver never said", len(a.Answer))
	}
}

// O-10: a reply must have the query's opcode. One with the right ID and question and an A record,
// but opcode UPDATE, is not the answer to a QUERY: the wait goes on, and with nothing else coming
// the client gets outbound's SERVFAIL at the deadline. Was: the UPDATE reply was taken as the
// answer.
func TestO10WrongOpcodeIsNotAnAnswer(t *testing.T) {
	addr := startRawResolver(t, func(q []byte) []byte {
		req := new(dns.Msg)
		if req.Unpack(q) != nil {
			return nil
		}
		m := new(dns.Msg)
		m.SetReply(req)
		m.Opcode = dns.OpcodeUpdate
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.ParseIP("192.0.2.9")}}
		b, _ := m.Pack()
		return b
	})
	o := newHandler(t, "outbound example. {\nto "+addr+"\nprivate 127.0.0.0/8\ntimeout 1s\n}")
	m := new(dns.Msg)
	m.SetQuestion("op.example.", dns.TypeA)
	a := serveAny(o, m)
	if a.Opcode != dns.OpcodeQuery || (a.Rcode == dns.RcodeSuccess && len(a.Answer) > 0) {
		t.Errorf("O-10: a reply with opcode %s to a QUERY was taken as the answer: %s, %d answers", dns.OpcodeToString[a.Opcode], dns.RcodeToString[a.Rcode], len(a.Answer))
	}
}

// O-10: a reply whose question differs from the query's only in case (0x20) matches it: the client
// gets its answer.
func TestO10CaseMixedQuestion(t *testing.T) {
	addr := startRawResolver(t, func(q []byte) []byte {
		req := new(dns.Msg)
		if req.Unpack(q) != nil {
			return nil
		}
		m := new(dns.Msg)
		m.SetReply(req)
		m.Question[0].Name = strings.ToUpper(m.Question[0].Name)
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.ParseIP("192.0.2.9")}}
		b, _ := m.Pack()
		return b
	})
	o := newHandler(t, "outbound example. {\nto "+addr+"\nprivate 127.0.0.0/8\ntimeout 1s\n}")
	m := new(dns.Msg)
	m.SetQuestion("mixed.example.", dns.TypeA)
	if a := serve(t, o, m); a.Rcode != dns.RcodeSuccess || len(a.Answer) != 1 {
		t.Errorf("0x20: %v", a)
	}
}

// O-10 (a truncated answer is retried over TCP), forward parity: a resolver cuts its UDP reply at
// 512 bytes, mid-record, with TC set (older servers and middleboxes do). A reply with our ID that
// does not parse but says TC is taken as truncated and asked again over TCP, as the client does
// after pkg/proxy's TC answer: the client gets the whole 40-record answer, as through forward (the
// baseline, a real server and a stub client), and the path is not charged a failure (O-5). Was:
// the reply was taken for garbage (errMalformed), the path charged, and the client got SERVFAIL.
func TestO10ByteTruncatedUDPRetriedOverTCP(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.50:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	l, err := net.Listen("tcp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	var tcpQueries atomic.Int64
	srv := &dns.Server{Listener: l, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		tcpQueries.Add(1)
		w.WriteMsg(bigReply(q))
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := new(dns.Msg)
			if q.Unpack(buf[:n]) != nil {
				continue
			}
			b, _ := bigReply(q).Pack()
			b[2] |= 0x02 // TC
			pc.WriteTo(b[:512], from)
		}
	}()
	// forward, the baseline, through a real server and a stub client (UDP, then TCP on TC).
	s := coretest.Start(t, "fwd.example.:0 {\nbind 127.0.0.1\nforward . "+pc.LocalAddr().String()+"\n}")
	if fm, err := stubQuery(s, "cut.fwd.example.", false); err != nil || fm.Rcode != dns.RcodeSuccess || len(fm.Answer) != 40 {
		t.Errorf("forward: %v %v", fm, err)
	} else {
		t.Logf("forward: %s", describe(fm))
	}
	o := newHandler(t, "outbound example. {\nto "+pc.LocalAddr().String()+"\nprivate 127.0.0.0/8\ntimeout 2s\n}")
	m := new(dns.Msg)
	m.SetQuestion("cut.example.", dns.TypeA)
	m.SetEdns0(1232, false)
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	_, serr := o.ServeDNS(context.Background(), rec, m)
	a := rec.Msg
	t.Logf("outbound: %s (%v)", describe(a), serr)
	if a.Rcode != dns.RcodeSuccess || len(a.Answer) != 40 {
		t.Errorf("O-10: a byte-truncated UDP reply with TC: the client got %s with %d answers (TCP asked %d times)", dns.RcodeToString[a.Rcode], len(a.Answer), tcpQueries.Load())
	}
	if _, _, _, consec, _ := o.rk.pairs[0].stats(time.Now()); consec != 0 {
		t.Errorf("O-5: a truncated reply was charged as %d path failures", consec)
	}
}

// TestHedgingRaces over TCP, with the resolver closing idle connections quickly: stale pooled
// connections, hedges and cancellations at once. Every query is answered.
func TestO10HedgingRacesTCPStale(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	r.tcpIdle.Store(int64(150 * time.Millisecond))
	r.slowDown(netip.MustParseAddr("127.0.0.11"), attemptMin)
	o := newHandler(t, twoPaths(r.addr, "timeout 3s\nforce_tcp"))
	for round := range 3 {
		var wg sync.WaitGroup
		errs := make(chan string, 40)
		for i := range 40 {
			wg.Go(func() {
				name := fmt.Sprintf("t%d-%d.example.", round, i)
				if m, _ := serveMeta(t, o, name); m == nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
					errs <- name + ": " + dns.RcodeToString[m.Rcode]
				}
			})
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Errorf("round %d: %s", round, e)
		}
		deadline := time.Now().Add(5 * time.Second)
		for r.closed.Load() < r.accepted.Load() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		for _, p := range o.rk.pairs {
			p.mu.Lock()
			p.consec, p.tot, p.succ, p.lat = 0, 0, 0, 0
			p.mu.Unlock()
		}
		failGen.Add(1)
	}
	t.Logf("resolver: %d TCP accepted, %d queries", r.accepted.Load(), r.queries.Load())
}
