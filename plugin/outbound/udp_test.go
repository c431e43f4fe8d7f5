package outbound

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
	"go.uber.org/goleak"
)

// testPair is a pair of a test endpoint towards dst, closed at the end of the test.
func testPair(t *testing.T, dst string) *pair {
	t.Helper()
	e := &Endpoint{Name: "t-" + t.Name()}
	p := e.acquire(netip.MustParseAddrPort(dst))
	t.Cleanup(func() { e.release(p) })
	return p
}

// testAttempt is an attempt through p for name A.
func testAttempt(p *pair, name string) *attempt {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	wire, _ := m.Pack()
	return &attempt{p: p, q: m.Question[0], wire: wire}
}

// listenRaw is a UDP socket on 127.0.0.50 the test answers through by hand.
func listenRaw(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.50:0")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadBuffer(4 << 20) // bursts of queries from many goroutines
	return c
}

// eachQuery calls f, in a goroutine of its own, for each query that reaches pc, until pc closes.
func eachQuery(pc *net.UDPConn, f func(q *dns.Msg, from *net.UDPAddr)) {
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFromUDP(buf)
			if err != nil {
				return
			}
			q := new(dns.Msg)
			if q.Unpack(buf[:n]) == nil {
				f(q, from)
			}
		}
	}()
}

// answerTo is the packed answer to the query q (A record addr), with ID id.
func answerTo(q *dns.Msg, id uint16, addr net.IP) []byte {
	m := new(dns.Msg)
	m.SetReply(q)
	m.Id = id
	m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: addr}}
	b, _ := m.Pack()
	return b
}

// O-10 with shared sockets: the IDs of the queries in flight on one socket are all different,
// whatever the random draws: a draw already taken there is drawn again. The draws here come from
// eight values only, so eight queries collide unless the socket avoids it.
func TestO10IDsUniqueOnASocket(t *testing.T) {
	pc := listenRaw(t)
	p := testPair(t, pc.LocalAddr().String())
	u := p.up
	rng := rand.New(rand.NewPCG(1, 2))
	draw := func() uint16 { return uint16(rng.IntN(8)) }
	wire := testAttempt(p, "id.example.").wire
	ws := make([]*waiter, 0, 8)
	for range 8 {
		w, err := u.register(wire, draw)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
		u.mu.Lock()
		for i := range u.socks {
			u.socks[i] = w.s // every query on the first socket
		}
		u.mu.Unlock()
	}
	seen := map[uint16]bool{}
	for _, w := range ws {
		if w.s != ws[0].s {
			t.Fatal("the queries are not on one socket")
		}
		if seen[w.id] {
			t.Errorf("O-10: ID %d given to two queries in flight on the same socket", w.id)
		}
		seen[w.id] = true
	}
}

// O-10, no ID reuse on a socket: query A gives up without a reply (its time was up) and query B
// on the same socket draws A's ID. The resolver's late header-only REFUSED for A (legal, matched
// by the ID alone, it has no question to tell) must not become B's answer: B gets another ID, and
// its own answer is the first datagram it sees.
func TestO10NoIDReuseAfterAQueryLeft(t *testing.T) {
	pc := listenRaw(t)
	p := testPair(t, pc.LocalAddr().String())
	draws := []uint16{7, 7, 7, 8}
	draw := func() uint16 { id := draws[0]; draws = draws[1:]; return id }
	wA, err := p.up.register(testAttempt(p, "a.example.").wire, draw)
	if err != nil {
		t.Fatal(err)
	}
	sA, idA := wA.s, wA.id
	wA.leave() // A's time is up: no reply
	b := testAttempt(p, "b.example.")
	wB, err := p.up.register(b.wire, draw)
	if err != nil {
		t.Fatal(err)
	}
	defer wB.leave()
	if wB.s != sA {
		t.Fatal("B is not on A's socket")
	}
	if wB.id == idA {
		t.Errorf("O-10: query B got ID %d, the ID of query A that left the same socket without a reply", wB.id)
	}
	late := make([]byte, 12) // A's late header-only REFUSED
	binary.BigEndian.PutUint16(late, idA)
	late[2], late[3] = 0x80, dns.RcodeRefused
	to := sA.c.LocalAddr().(*net.UDPAddr)
	pc.WriteToUDP(late, to)
	pc.WriteToUDP(answerTo(&dns.Msg{Question: []dns.Question{b.q}}, wB.id, net.IPv4(192, 0, 2, 1)), to)
	d := <-wB.ch
	if d.err != nil {
		t.Fatal(d.err)
	}
	b.id = wB.id
	m, _ := b.match((*d.b)[:d.n], d.cut)
	dgramPool.Put(d.b)
	if m == nil || m.Rcode != dns.RcodeSuccess {
		t.Errorf("O-10: query B took %v for its answer, want its own NOERROR", m)
	}
}

// O-10 under load: 500 queries in flight at once through one pair (more than its sockets take
// before they are replaced). The resolver holds them 50 at a time, checks that no two held from the
// same source port share an ID, then answers each with the ID of another held query from the same
// port first (a reply for A with B's ID: B must not take it, its question differs) and with its
// own ID after, in reverse order. Every query gets the answer to its own question.
func TestO10RepliesReachTheirOwnQuery(t *testing.T) {
	const n, hold = 500, 50
	pc := listenRaw(t)
	p := testPair(t, pc.LocalAddr().String())
	type held struct {
		q    *dns.Msg
		from *net.UDPAddr
	}
	fail := make(chan string, 1)
	answer := func(qs []held) {
		byPort := map[int]map[uint16]bool{}
		for _, h := range qs {
			ids := byPort[h.from.Port]
			if ids == nil {
				ids = map[uint16]bool{}
				byPort[h.from.Port] = ids
			}
			if ids[h.q.Id] {
				select {
				case fail <- fmt.Sprintf("ID %d twice in flight from port %d", h.q.Id, h.from.Port):
				default:
				}
			}
			ids[h.q.Id] = true
		}
		for i, h := range qs {
			for j := range qs { // another query from the same port
				o := qs[(i+1+j)%len(qs)]
				if o.from.Port == h.from.Port && o.q.Id != h.q.Id {
					pc.WriteToUDP(answerTo(h.q, o.q.Id, net.IPv4(192, 0, 2, 66)), h.from)
					break
				}
			}
		}
		for _, h := range slices.Backward(qs) {
			pc.WriteToUDP(answerTo(h.q, h.q.Id, net.IPv4(192, 0, 2, 1)), h.from)
		}
	}
	in := make(chan held, n)
	// Read at once, so a burst of queries does not overflow the socket.
	eachQuery(pc, func(q *dns.Msg, from *net.UDPAddr) { in <- held{q, from} })
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		var qs []held
		for {
			select {
			case <-stop:
				return
			case h := <-in:
				if qs = append(qs, h); len(qs) == hold {
					answer(qs)
					qs = nil
				}
			case <-time.After(50 * time.Millisecond):
				answer(qs) // the stragglers
				qs = nil
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan string, n)
	deadline := time.Now().Add(10 * time.Second)
	for i := range n {
		wg.Go(func() {
			name := fmt.Sprintf("q%d.example.", i)
			a := testAttempt(p, name)
			defer a.close()
			err := a.send(deadline)
			if err == nil {
				err = a.wait(deadline)
			}
			switch {
			case err != nil:
				errs <- fmt.Sprintf("%s: %v", name, err)
			case a.m.Question[0].Name != name || len(a.m.Answer) != 1 || !a.m.Answer[0].(*dns.A).A.Equal(net.IPv4(192, 0, 2, 1)):
				errs <- fmt.Sprintf("%s got the reply %v", name, a.m)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("O-10: %s", e)
	}
	select {
	case e := <-fail:
		t.Errorf("O-10: %s", e)
	default:
	}
}

// H-6 with shared sockets: a pair closed while queries wait on its sockets (an FQDN target
// pruned, the last holder gone): every wait ends at once with errClosed (which is not a path
// failure), and the sockets and their readers are gone.
func TestUDPSocketsClosedUnderWaitingQueries(t *testing.T) {
	snapshot := goleak.IgnoreCurrent()
	pc := listenRaw(t)
	got := make(chan struct{}, 16)
	eachQuery(pc, func(*dns.Msg, *net.UDPAddr) { got <- struct{}{} }) // silence
	e := &Endpoint{Name: "prune"}
	p := e.acquire(netip.MustParseAddrPort(pc.LocalAddr().String()))
	const n = 10
	ended := make(chan error, n)
	for i := range n {
		a := testAttempt(p, fmt.Sprintf("w%d.example.", i))
		go func() {
			deadline := time.Now().Add(10 * time.Second)
			err := a.send(deadline)
			if err == nil {
				err = a.wait(deadline)
			}
			a.close()
			ended <- err
		}()
	}
	for range n {
		<-got
	}
	start := time.Now()
	e.release(p) // the last holder: the pair closes
	for range n {
		if err := <-ended; !errors.Is(err, errClosed) {
			t.Errorf("a wait on a closed pair ended with %v, want errClosed", err)
		}
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the waits ended %v after the close", took)
	}
	p.up.mu.Lock()
	open := len(p.up.socksOpen)
	p.up.mu.Unlock()
	if open != 0 {
		t.Errorf("%d sockets still open after the close", open)
	}
	pc.Close()
	coretest.NoLeak(t, snapshot)
}

// O-10: a reply with the right ID and another question, alone, then the answer 100 ms later: the
// first never ends the wait, the second is the answer.
func TestO10WrongQuestionThenTheAnswer(t *testing.T) {
	pc := listenRaw(t)
	eachQuery(pc, func(q *dns.Msg, from *net.UDPAddr) {
		other := q.Copy()
		other.Question[0].Name = "other.example."
		pc.WriteToUDP(answerTo(other, q.Id, net.IPv4(192, 0, 2, 66)), from)
		time.Sleep(100 * time.Millisecond) // the resolver's answer comes later: the case under test
		pc.WriteToUDP(answerTo(q, q.Id, net.IPv4(192, 0, 2, 1)), from)
	})
	o := newHandler(t, "outbound example. {\nto "+pc.LocalAddr().String()+"\nprivate 127.0.0.0/8\ntimeout 2s\n}")
	m := new(dns.Msg)
	m.SetQuestion("right.example.", dns.TypeA)
	a := serve(t, o, m)
	if a.Rcode != dns.RcodeSuccess || len(a.Answer) != 1 || !a.Answer[0].(*dns.A).A.Equal(net.IPv4(192, 0, 2, 1)) {
		t.Errorf("O-10: the client got %v", a)
	}
}

// waitFor puts a query for name A with ID id on s, as register would, and returns it.
func waitFor(s *udpSock, name string, id uint16) *dns.Msg {
	q := new(dns.Msg)
	q.SetQuestion(name, dns.TypeA)
	q.Id = id
	wire, _ := q.Pack()
	s.waiters[id] = &waiter{s: s, id: id, q: questionOf(wire), ch: make(chan datagram, waiterQueue)}
	return q
}

// A batch read (recvmmsg) that brings valid replies and garbage together: each datagram goes to the
// query it answers or nowhere. Garbage, a datagram too short to be DNS, a query, a reply with an
// unknown ID and a reply to another question reach nobody; the answer reaches its query; a
// datagram longer than the buffer reaches its query marked cut, and garbage with a query's ID
// reaches that query (whose match fails the attempt, O-10).
func TestRecvmmsgBatchMixed(t *testing.T) {
	pc := listenRaw(t)
	c, err := net.DialUDP("udp", nil, pc.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	u := &upstream{}
	s := &udpSock{u: u, c: c, waiters: map[uint16]*waiter{}}
	qa, qb := waitFor(s, "a.example.", 100), waitFor(s, "b.example.", 200)
	wrongQ := qa.Copy()
	wrongQ.Question[0].Name = "x.example."
	big := new(dns.Msg)
	big.SetReply(qb)
	for i := range 300 {
		big.Answer = append(big.Answer, &dns.A{Hdr: dns.RR_Header{Name: "b.example.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.IPv4(192, 0, 2, byte(i))})
	}
	bigWire, _ := big.Pack()
	garbageB := make([]byte, 30)
	binary.BigEndian.PutUint16(garbageB, qb.Id)
	garbageB[2], garbageB[5] = 0x80, 9
	queryA, _ := qa.Pack()
	sends := [][]byte{
		{1, 2, 3}, // too short
		answerTo(wrongQ, qa.Id, net.IPv4(192, 0, 2, 9)), // A's ID, another question
		answerTo(qa, 999, net.IPv4(192, 0, 2, 9)),       // nobody's ID
		queryA, // not a response
		answerTo(qa, qa.Id, net.IPv4(192, 0, 2, 1)), // A's answer
		bigWire,  // B's answer, longer than the buffer
		garbageB, // B's ID, does not parse
	}
	for _, b := range sends {
		if _, err := pc.WriteTo(b, c.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	r := newBatchReader(c)
	var (
		bufs  [readBatch]*[]byte
		rcvd  [readBatch]received
		reads int
	)
	for i := range bufs {
		bufs[i] = dgramPool.Get().(*[]byte)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for total := 0; total < len(sends); {
		n, err := r.read(bufs[:], rcvd[:])
		if err != nil {
			t.Fatal(err)
		}
		reads++
		for i, g := range rcvd[:n] {
			if len(sends[total+i]) <= udpReadBuf && g.n != len(sends[total+i]) || g.cut != (len(sends[total+i]) > udpReadBuf) {
				t.Errorf("datagram %d: read %d bytes (cut %v), sent %d", total+i, g.n, g.cut, len(sends[total+i]))
			}
			if s.deliver(bufs[i], g.n, g.cut) {
				bufs[i] = dgramPool.Get().(*[]byte)
			}
		}
		total += n
	}
	if runtime.GOOS == "linux" && reads == len(sends) {
		t.Errorf("%d datagrams read one at a time: no batch", reads)
	}
	want := map[uint16][]string{qa.Id: {"answer"}, qb.Id: {"cut", "garbage"}}
	for id, w := range s.waiters {
		var saw []string
		for len(w.ch) > 0 {
			d := <-w.ch
			m := new(dns.Msg)
			switch {
			case d.cut:
				saw = append(saw, "cut")
			case m.Unpack((*d.b)[:d.n]) != nil:
				saw = append(saw, "garbage")
			case m.Question[0].Name == "a.example." && m.Answer[0].(*dns.A).A.Equal(net.IPv4(192, 0, 2, 1)):
				saw = append(saw, "answer")
			default:
				saw = append(saw, "other: "+m.String())
			}
		}
		if fmt.Sprint(saw) != fmt.Sprint(want[id]) {
			t.Errorf("query %d was handed %v, want %v", id, saw, want[id])
		}
	}
}

// O-10 ("a truncated answer is retried over TCP"): a UDP reply longer than the reader's buffer (a
// resolver that ignores the 1232 bytes we advertise) is cut by the kernel: the query is asked again
// over TCP, and the client gets the whole answer, as for TC. The path is not charged.
func TestOversizedDatagramAskedAgainOverTCP(t *testing.T) {
	pc := listenRaw(t)
	l, err := net.Listen("tcp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	huge := func(q *dns.Msg) *dns.Msg {
		m := new(dns.Msg)
		m.SetReply(q)
		for i := range 300 {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.IPv4(192, 0, 2, byte(i))})
		}
		return m
	}
	var tcpAsked sync.WaitGroup
	tcpAsked.Add(1)
	srv := &dns.Server{Listener: l, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		w.WriteMsg(huge(q))
		tcpAsked.Done()
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	eachQuery(pc, func(q *dns.Msg, from *net.UDPAddr) {
		b, _ := huge(q).Pack() // no TC: sent whole, longer than udpReadBuf
		pc.WriteToUDP(b, from)
	})
	o := newHandler(t, "outbound example. {\nto "+pc.LocalAddr().String()+"\nprivate 127.0.0.0/8\ntimeout 2s\n}")
	m := new(dns.Msg)
	m.SetQuestion("huge.example.", dns.TypeA)
	m.SetEdns0(65000, false)
	rec := dnstest.NewRecorder(&test.ResponseWriter{}) // a UDP client with room for the answer
	o.ServeDNS(context.Background(), rec, m)
	if rec.Msg == nil || rec.Msg.Rcode != dns.RcodeSuccess || len(rec.Msg.Answer) != 300 {
		t.Fatalf("O-10: a %d-byte UDP reply: the client got %v", 300*16, rec.Msg)
	}
	tcpAsked.Wait()
	if _, _, _, consec, _ := o.rk.pairs[0].stats(time.Now()); consec != 0 {
		t.Errorf("O-5: an oversized reply was charged as %d path failures", consec)
	}
}

// A resolver port that is closed answers with ICMP port unreachable; the socket's reader gets it
// and the query fails at once (a network error moves to the next pair, O-6), as a socket per query
// did, rather than at the deadline.
func TestUnreachablePortFailsFast(t *testing.T) {
	pc := listenRaw(t)
	addr := pc.LocalAddr().String()
	pc.Close() // nothing listens there now
	o := newHandler(t, "outbound example. {\nto "+addr+"\nprivate 127.0.0.0/8\ntimeout 3s\n}")
	m := new(dns.Msg)
	m.SetQuestion("closed.example.", dns.TypeA)
	start := time.Now()
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	o.ServeDNS(context.Background(), rec, m)
	if took := time.Since(start); rec.Msg == nil || rec.Msg.Rcode != dns.RcodeServerFailure || took > time.Second {
		t.Errorf("a closed resolver port: %v after %v, want SERVFAIL at once", rec.Msg, took)
	}
}

// O-6 with a shared socket: the ICMP port unreachable that came back for query A may be taken by
// the next write on the socket (Linux gives the pending error to a send as to a read) rather than
// by the reader. Query A must be told all the same, at once, not left to wait out its time and be
// charged a timeout. The socket here has no reader, so only the writes can see the error.
func TestO6UnreachableTakenByAWriteFailsTheSocket(t *testing.T) {
	dead := listenRaw(t)
	addr := netip.MustParseAddrPort(dead.LocalAddr().String())
	dead.Close() // nothing listens there now
	p := testPair(t, addr.String())
	u := p.up
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		t.Fatal(err)
	}
	s := &udpSock{u: u, c: c, opened: time.Now(), waiters: map[uint16]*waiter{}}
	u.mu.Lock()
	u.socksOpen = map[*udpSock]bool{s: true} // closed with the pair
	for i := range u.socks {
		u.socks[i] = s
	}
	u.mu.Unlock()
	a := testAttempt(p, "a.example.")
	if err := a.sendUDP(); err != nil {
		t.Fatal(err)
	}
	defer a.close()
	// Each write draws an ICMP error; the first write after one arrived returns it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		b := testAttempt(p, "b.example.")
		err := b.sendUDP()
		b.close()
		if err != nil {
			if !unreachable(err) {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no write returned the ICMP error")
		}
	}
	select {
	case d := <-a.w.ch:
		if !unreachable(d.err) {
			t.Errorf("O-6: query A got %v, want the unreachable error", d.err)
		}
	default:
		t.Error("O-6: query A was not told its resolver is unreachable: it would wait out its time")
	}
}

// RFC 5452, O-10 source ports: a socket takes at most maxUses queries before a new socket with a
// new port takes its place. One query at a time keeps to one socket.
func TestUDPSourcePortsChange(t *testing.T) {
	var mu sync.Mutex
	var ports []uint16
	pc := listenRaw(t)
	eachQuery(pc, func(q *dns.Msg, from *net.UDPAddr) {
		mu.Lock()
		ports = append(ports, uint16(from.Port))
		mu.Unlock()
		pc.WriteToUDP(answerTo(q, q.Id, net.IPv4(192, 0, 2, 1)), from)
	})
	p := testPair(t, pc.LocalAddr().String())
	const n = 3 * udpSockets * maxUses
	for i := range n {
		a := testAttempt(p, fmt.Sprintf("p%d.example.", i))
		deadline := time.Now().Add(2 * time.Second)
		err := a.send(deadline)
		if err == nil {
			err = a.wait(deadline)
		}
		a.close()
		if err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	per := map[uint16]int{}
	for _, port := range ports {
		per[port]++
	}
	for port, k := range per {
		if k > maxUses {
			t.Errorf("RFC 5452: source port %d carried %d queries, at most %d", port, k, maxUses)
		}
	}
	if len(per) < n/maxUses {
		t.Errorf("RFC 5452: %d queries left from %d source ports, want at least %d", n, len(per), n/maxUses)
	}
	for _, port := range ports[1:maxUses] {
		if port != ports[0] {
			t.Errorf("one query at a time: the first %d left from more than one socket", maxUses)
			break
		}
	}
}

// A socket takes queries for at most maxAge: an idle one closes by itself (its reader with it),
// the next query leaves from a new one, and a query still waiting at that age gets its answer.
func TestUDPSocketMaxAge(t *testing.T) {
	defer socketAge.Store(socketAge.Load())
	socketAge.Store(int64(200 * time.Millisecond))
	r := startResolver(t, "127.0.0.50")
	p := testPair(t, r.addr)
	ask := func(name string) *udpSock {
		a := testAttempt(p, name)
		defer a.close()
		deadline := time.Now().Add(2 * time.Second)
		err := a.send(deadline)
		s := a.w.s
		if err == nil {
			err = a.wait(deadline)
		}
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := ask("first.example.")
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.up.mu.Lock()
		open := len(p.up.socksOpen)
		p.up.mu.Unlock()
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d idle sockets still open after their age", open)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s2 := ask("second.example."); s2 == s {
		t.Error("the query after the age went through the old socket")
	}
	// A query still waiting when its socket's age is up keeps its socket until its answer.
	r.setDelay(3 * time.Duration(socketAge.Load()))
	start := time.Now()
	s3 := ask("slow.example.")
	if time.Since(start) < time.Duration(socketAge.Load()) {
		t.Fatal("the answer came before the socket's age")
	}
	p.up.mu.Lock()
	defer p.up.mu.Unlock()
	if !s3.retired {
		t.Error("a socket past its age still takes queries")
	}
}

// Queries in flight at once spread over several sockets (source ports), so a resolver that spreads
// its load by source port (SO_REUSEPORT) sees several; never more than udpSockets.
func TestUDPConcurrentQueriesSpread(t *testing.T) {
	pc := listenRaw(t)
	ports := make(chan int, 16)
	eachQuery(pc, func(_ *dns.Msg, from *net.UDPAddr) { ports <- from.Port }) // silence
	p := testPair(t, pc.LocalAddr().String())
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			a := testAttempt(p, fmt.Sprintf("c%d.example.", i))
			defer a.close()
			deadline := time.Now().Add(300 * time.Millisecond)
			if a.send(deadline) == nil {
				a.wait(deadline)
			}
		})
	}
	wg.Wait()
	seen := map[int]bool{}
	for range n {
		seen[<-ports] = true
	}
	if len(seen) < 2 || len(seen) > udpSockets {
		t.Errorf("%d queries in flight at once left from %d source ports, want 2..%d", n, len(seen), udpSockets)
	}
}

// O-10 (issue 13: a header-only reply is an answer only with an error rcode): datagrams with a
// query's ID that its match can never take - header-only NOERROR, two questions - are dropped by
// the socket's reader, not handed to the query: three of them in a batch ahead of the answer
// would fill the places kept for its datagrams, and the answer would be dropped. A header-only
// REFUSED, and garbage with the ID (its match fails the attempt), still reach their query.
func TestO10ReaderDropsRepliesTheMatchRefuses(t *testing.T) {
	u := &upstream{}
	s := &udpSock{u: u, waiters: map[uint16]*waiter{}}
	qa, qb := waitFor(s, "a.example.", 100), waitFor(s, "b.example.", 200)
	header := func(id uint16, rcode byte, qd, an uint16) []byte {
		h := make([]byte, 12)
		binary.BigEndian.PutUint16(h, id)
		h[2], h[3] = 0x80, rcode
		binary.BigEndian.PutUint16(h[4:], qd)
		binary.BigEndian.PutUint16(h[6:], an)
		return h
	}
	twoQ := new(dns.Msg)
	twoQ.SetReply(qa)
	twoQ.Question = append(twoQ.Question, qa.Question[0])
	twoQWire, _ := twoQ.Pack()
	sends := [][]byte{
		header(qa.Id, dns.RcodeSuccess, 0, 0), // header-only NOERROR: never an answer
		header(qa.Id, dns.RcodeSuccess, 0, 0),
		header(qa.Id, dns.RcodeSuccess, 0, 0),
		twoQWire, // two questions: never an answer
		answerTo(qa, qa.Id, net.IPv4(192, 0, 2, 1)),
		append(header(qb.Id, dns.RcodeSuccess, 0, 1), 5, 'a', 'b'), // a record cut in its name: garbage
		header(qb.Id, dns.RcodeRefused, 0, 0),                      // header-only REFUSED: an answer
	}
	for _, m := range sends {
		b := dgramPool.Get().(*[]byte)
		n := copy(*b, m)
		if !s.deliver(b, n, false) {
			dgramPool.Put(b)
		}
	}
	want := map[uint16][]string{qa.Id: {"answer"}, qb.Id: {"garbage", "REFUSED"}}
	for id, w := range s.waiters {
		var saw []string
		for len(w.ch) > 0 {
			d := <-w.ch
			m := new(dns.Msg)
			switch {
			case m.Unpack((*d.b)[:d.n]) != nil:
				saw = append(saw, "garbage")
			case len(m.Question) == 0:
				saw = append(saw, dns.RcodeToString[m.Rcode])
			case len(m.Answer) == 1:
				saw = append(saw, "answer")
			default:
				saw = append(saw, "other: "+m.String())
			}
			dgramPool.Put(d.b)
		}
		if fmt.Sprint(saw) != fmt.Sprint(want[id]) {
			t.Errorf("O-10: query %d was handed %v, want %v", id, saw, want[id])
		}
	}
}
