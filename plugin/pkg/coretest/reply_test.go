package coretest

import (
	"context"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
)

func TestServeAndCheckReply(t *testing.T) {
	q := new(dns.Msg)
	q.SetQuestion("example.org.", dns.TypeA)
	wire, _ := q.Pack()
	if _, ok := Query(wire); !ok {
		t.Fatal("a plain query was not accepted")
	}
	q.Response = true
	resp, _ := q.Pack()
	q.Response = false
	if _, ok := Query(resp); ok {
		t.Fatal("a response was accepted as a query")
	}

	m, err := Serve(context.Background(), Echo, q, "10.0.0.1")
	if err != nil || CheckReply(q, m, dns.RcodeSuccess) != nil {
		t.Fatalf("echo: %v, %v", err, CheckReply(q, m, dns.RcodeSuccess))
	}
	if err := CheckReply(q, m, dns.RcodeNameError); err == nil || !strings.Contains(err.Error(), "rcode NOERROR") {
		t.Fatalf("an rcode not allowed: %v", err)
	}
	m.Id++
	if err := CheckReply(q, m, dns.RcodeSuccess); err == nil || !strings.Contains(err.Error(), "ID") {
		t.Fatalf("a wrong ID: %v", err)
	}
	m.Id--
	m.Question[0].Qtype = dns.TypeAAAA
	if err := CheckReply(q, m, dns.RcodeSuccess); err == nil || !strings.Contains(err.Error(), "question") {
		t.Fatalf("a wrong question: %v", err)
	}

	silent := test.HandlerFunc(func(context.Context, dns.ResponseWriter, *dns.Msg) (int, error) { return dns.RcodeSuccess, nil })
	if _, err := Serve(context.Background(), silent, q, "10.0.0.1"); err == nil {
		t.Fatal("a handler that writes nothing and returns NOERROR passed")
	}
	refused := test.HandlerFunc(func(context.Context, dns.ResponseWriter, *dns.Msg) (int, error) { return dns.RcodeRefused, nil })
	m, err = Serve(context.Background(), refused, q, "10.0.0.1")
	if err != nil || CheckReply(q, m, dns.RcodeRefused) != nil {
		t.Fatalf("REFUSED left to the server: %v, %v", err, CheckReply(q, m, dns.RcodeRefused))
	}
}
