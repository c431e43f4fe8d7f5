package main

import (
	"net"
	"slices"
	"sync"

	"github.com/miekg/dns"
)

// resolver is a small private resolver: it answers every A query with 10.20.30.40 and records the
// source address of each query, so the demo can show which egress endpoint reached it.
type resolver struct {
	addr     string
	udp, tcp *dns.Server
	mu       sync.Mutex
	seen     map[string]bool
}

func startResolver(addr string) (*resolver, error) {
	r := &resolver{addr: addr, seen: map[string]bool{}}
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		pc.Close()
		return nil, err
	}
	r.udp = &dns.Server{PacketConn: pc, Handler: r}
	r.tcp = &dns.Server{Listener: ln, Handler: r}
	go func() { _ = r.udp.ActivateAndServe() }()
	go func() { _ = r.tcp.ActivateAndServe() }()
	return r, nil
}

func (r *resolver) ServeDNS(w dns.ResponseWriter, q *dns.Msg) {
	host, _, _ := net.SplitHostPort(w.RemoteAddr().String())
	r.mu.Lock()
	r.seen[host] = true
	r.mu.Unlock()
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	if len(q.Question) == 1 && q.Question[0].Qtype == dns.TypeA {
		m.Answer = append(m.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30},
			A:   net.IPv4(10, 20, 30, 40),
		})
	}
	_ = w.WriteMsg(m)
}

func (r *resolver) reset() {
	r.mu.Lock()
	r.seen = map[string]bool{}
	r.mu.Unlock()
}

func (r *resolver) sources() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.seen))
	for s := range r.seen {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func (r *resolver) stop() {
	_ = r.udp.Shutdown()
	_ = r.tcp.Shutdown()
}
