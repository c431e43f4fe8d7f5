package outbound

import (
	"encoding/binary"
	"io"
	"testing"
	"time"

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
