package routingpolicy

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// spyWriter is a wrapper of a plugin before routingpolicy that passes Write on (Unwrap) and notes
// which writer is beneath the query's ScrubWriter when the answer goes through it.
type spyWriter struct {
	dns.ResponseWriter
	sw      *request.ScrubWriter
	beneath *string
}

func (s spyWriter) Unwrap() dns.ResponseWriter { return s.ResponseWriter }

func (s spyWriter) Write(b []byte) (int, error) {
	*s.beneath = fmt.Sprintf("%T", s.sw.ResponseWriter)
	return s.ResponseWriter.Write(b)
}

// TestPackedSentDirect: issue 17, lever 5 (R-ZONE-1): over UDP, a packed answer is sent by
// udpanswer.Direct, put beneath the wrappers for its Write only (the wrapper above still sees the
// Write, and miekg/dns's writer is back beneath the ScrubWriter afterwards), from the address the
// client asked of a listener bound to every address (127.0.0.2 and ::1; without the remembered
// control message the kernel would answer 127.0.0.2's client from 127.0.0.1). Over TCP, miekg/dns's
// writer writes (a decorated UDP writer gets WriteMsg: TestPackedThroughDecoratedWriter).
func TestPackedSentDirect(t *testing.T) {
	rp, _ := newTest(t, wireZone())
	type seen struct{ beneath, after string }
	seenc := make(chan seen, 1)
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		var s seen
		sw := request.NewScrubWriter(r, w)
		rp.ServeDNS(context.Background(), spyWriter{ResponseWriter: sw, sw: sw, beneath: &s.beneath}, r)
		s.after = fmt.Sprintf("%T", sw.ResponseWriter)
		if sw.ResponseWriter != w {
			s.after += " (not the query's writer)"
		}
		seenc <- s
	})
	start := func(srv *dns.Server) {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ActivateAndServe() //nolint:errcheck // ends with Shutdown
		<-started
		t.Cleanup(func() { srv.Shutdown() })
	}
	pc, err := net.ListenPacket("udp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	start(&dns.Server{PacketConn: pc, Handler: handler})
	port := pc.LocalAddr().(*net.UDPAddr).Port
	for _, tc := range []struct{ from, asked string }{{"127.0.0.1", "127.0.0.2"}, {"::1", "::1"}, {"127.0.0.1", "127.0.0.2"}} {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(tc.from)})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := wireQuery{}.msg("www.example.org.", dns.TypeA).Pack()
		to := &net.UDPAddr{IP: net.ParseIP(tc.asked), Port: port}
		if _, err := c.WriteToUDP(b, to); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b = make([]byte, dns.MinMsgSize)
		n, from, err := c.ReadFromUDP(b)
		c.Close()
		if err != nil {
			t.Fatalf("asked %s: %v", to, err)
		}
		m := new(dns.Msg)
		if err := m.Unpack(b[:n]); err != nil || len(m.Answer) != 2 {
			t.Errorf("asked %s: %v %v", to, m, err)
		}
		if !from.IP.Equal(to.IP) {
			t.Errorf("asked %s, answered from %s", to, from)
		}
		if s := <-seenc; s.beneath != "*udpanswer.Direct" || s.after != "*dns.response" {
			t.Errorf("asked %s: written through %s, then %s beneath the ScrubWriter; want *udpanswer.Direct, then *dns.response", to, s.beneath, s.after)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	start(&dns.Server{Listener: l, Handler: handler})
	c := &dns.Client{Net: "tcp"}
	if m, _, err := c.Exchange(wireQuery{}.msg("www.example.org.", dns.TypeA), l.Addr().String()); err != nil || len(m.Answer) != 2 {
		t.Fatalf("tcp: %v %v", m, err)
	}
	if s := <-seenc; s.beneath != "*dns.response" || s.after != "*dns.response" {
		t.Errorf("tcp: written through %s, then %s beneath the ScrubWriter; want miekg/dns's", s.beneath, s.after)
	}
}
