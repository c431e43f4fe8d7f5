package coretest

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
)

// Query unpacks wire as a server would take it: a message that unpacks and that miekg/dns's
// default accept function lets through (a request, opcode QUERY or NOTIFY, one question, few
// records). Anything else never reaches a plugin, so a ServeDNS fuzz target skips it.
func Query(wire []byte) (*dns.Msg, bool) {
	if len(wire) < 12 {
		return nil, false
	}
	dh := dns.Header{
		Id:      binary.BigEndian.Uint16(wire[0:]),
		Bits:    binary.BigEndian.Uint16(wire[2:]),
		Qdcount: binary.BigEndian.Uint16(wire[4:]),
		Ancount: binary.BigEndian.Uint16(wire[6:]),
		Nscount: binary.BigEndian.Uint16(wire[8:]),
		Arcount: binary.BigEndian.Uint16(wire[10:]),
	}
	if dns.DefaultMsgAcceptFunc(dh) != dns.MsgAccept {
		return nil, false
	}
	m := new(dns.Msg)
	if m.Unpack(wire) != nil || len(m.Question) != 1 {
		return nil, false
	}
	return m, true
}

// Serve runs h on q from the client address from, as dnsserver does, and returns what the client
// receives: the message h wrote or, when h wrote none and returned an rcode the server answers
// for (plugin.ClientWrite false), the server's error reply. It is an error for h to write no
// answer and return an rcode that says it did (the client would get nothing), or to write one
// and return an rcode that makes the server write a second.
func Serve(ctx context.Context, h plugin.Handler, q *dns.Msg, from string) (*dns.Msg, error) {
	rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: from})
	rcode, err := h.ServeDNS(ctx, rec, q)
	switch {
	case rec.Msg == nil && plugin.ClientWrite(rcode):
		return nil, fmt.Errorf("no answer written, and rcode %s (error %v) tells the server one was", dns.RcodeToString[rcode], err)
	case rec.Msg != nil && !plugin.ClientWrite(rcode):
		return nil, fmt.Errorf("an answer written, and rcode %s (error %v) makes the server write a second", dns.RcodeToString[rcode], err)
	case rec.Msg == nil:
		m := new(dns.Msg)
		m.SetRcode(q, rcode)
		return m, nil
	}
	return rec.Msg, nil
}

// CheckReply says what is wrong with m as the reply to q, or nil: a reply packs and unpacks, is
// a response with q's ID, opcode and question, and has one of the allowed rcodes.
func CheckReply(q, m *dns.Msg, allowed ...int) error {
	if m == nil {
		return fmt.Errorf("no reply")
	}
	b, err := m.Pack()
	if err != nil {
		return fmt.Errorf("the reply does not pack: %v", err)
	}
	r := new(dns.Msg)
	if err := r.Unpack(b); err != nil {
		return fmt.Errorf("the reply does not unpack: %v", err)
	}
	switch {
	case !r.Response:
		return fmt.Errorf("the reply is not a response (QR clear)")
	case r.Id != q.Id:
		return fmt.Errorf("the reply's ID %d is not the query's %d", r.Id, q.Id)
	case r.Opcode != q.Opcode:
		return fmt.Errorf("the reply's opcode %d is not the query's %d", r.Opcode, q.Opcode)
	case len(r.Question) != 1 || r.Question[0] != q.Question[0]:
		return fmt.Errorf("the reply's question %v is not the query's %v", r.Question, q.Question[0])
	case !slices.Contains(allowed, r.Rcode):
		return fmt.Errorf("rcode %s is not one of %v", dns.RcodeToString[r.Rcode], rcodes(allowed))
	}
	return nil
}

func rcodes(rr []int) []string {
	out := make([]string, len(rr))
	for i, r := range rr {
		out[i] = dns.RcodeToString[r]
	}
	return out
}

// Echo is a next handler that answers every query with an empty NOERROR reply, for the ServeDNS
// fuzz targets of plugins that pass every query on.
var Echo = test.HandlerFunc(func(_ context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	m := new(dns.Msg)
	m.SetReply(r)
	return dns.RcodeSuccess, w.WriteMsg(m)
})

// FuzzPassThrough is the ServeDNS fuzz target of a plugin that answers no query itself: h, with
// Echo as its next plugin, takes any query a server accepts and the next plugin's reply reaches
// the client, one reply with the query's ID and question.
func FuzzPassThrough(f *testing.F, h plugin.Handler) {
	for _, qt := range []uint16{dns.TypeA, dns.TypeAXFR, dns.TypeANY} {
		m := new(dns.Msg)
		m.SetQuestion("www.example.org.", qt)
		m.SetEdns0(1232, true)
		b, _ := m.Pack()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, wire []byte) { FuzzServe(t, h, wire, "10.0.0.1", dns.RcodeSuccess) })
}

// FuzzServe is the body of a ServeDNS fuzz target: it takes wire as a server would (Query), has
// h answer it from the client address from (Serve) and checks the reply (CheckReply with the
// allowed rcodes). It returns the query and the reply, or nils when a server would not pass wire
// to a plugin.
func FuzzServe(t *testing.T, h plugin.Handler, wire []byte, from string, allowed ...int) (q, m *dns.Msg) {
	t.Helper()
	q, ok := Query(wire)
	if !ok {
		return nil, nil
	}
	m, err := Serve(context.Background(), h, q, from)
	if err == nil {
		err = CheckReply(q, m, allowed...)
	}
	if err != nil {
		t.Fatalf("%v\nquery:\n%v\nreply:\n%v", err, q, m)
	}
	return q, m
}
