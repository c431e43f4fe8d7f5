package outbound

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// The UDP side of a pair (README, "Transport"), as dnsdist does it: a few connected sockets
// per (source, target), each shared by the queries in flight on it and read by one goroutine that
// hands every reply to the query waiting for its ID and question. A socket per query in flight
// costs a read that finds nothing (EAGAIN) and a read that finds the reply for every query; one
// reader takes every reply that arrived while it was away in one recvmmsg. Each query still gets
// a random ID, never given before on its socket (O-10): a late reply to a query that gave up (a
// header-only error, matched by its ID alone) never reaches a newer query there.
//
// Source ports keep changing (RFC 5452): a socket is bound to SOURCE:0, so the kernel picks a
// random ephemeral port, and it takes at most maxUses queries and is open at most maxAge; then a
// new one takes its place, and the old one closes once its last query has its reply or gave up.
// Up to udpSockets sockets are in use at once per pair (pick), so under load a resolver that
// spreads its load by source port (SO_REUSEPORT) sees several.
const (
	udpSockets = 4
	maxAge     = 10 * time.Second // socketAge holds it; tests shorten it
	// udpReadBuf is the size of a reply the reader takes whole. Queries advertise udpBufSize; a
	// longer datagram is cut by the kernel, and the query is asked again over TCP, as for TC.
	udpReadBuf = 4096
	// readBatch is the most datagrams one read takes (recvmmsg on Linux, one elsewhere).
	readBatch = 16
	// waiterQueue bounds the datagrams that wait for a query to look at them: the reader drops
	// more rather than block (a flood with the right ID and question is a spoofer who would win
	// anyway). One more place is kept for the error that ends the wait.
	waiterQueue = 4
	// readBuffer is the socket receive buffer asked for (SO_RCVBUF).
	readBuffer = 1 << 20
)

// udpSock is one connected UDP socket of a pair and the queries waiting on it.
type udpSock struct {
	u      *upstream
	c      *net.UDPConn
	opened time.Time

	// guarded by u.mu
	sent    int             // queries sent: IDs handed out
	ids     [maxUses]uint16 // the IDs handed out, ids[:sent]
	waiters map[uint16]*waiter
	retired bool // takes no more queries; closes when its last waiter leaves
	closed  bool
}

// waiter is a query in flight on a socket: the reader hands it the datagrams with its ID, opcode
// and question.
type waiter struct {
	s      *udpSock
	id     uint16
	opcode byte   // the third header byte's opcode bits of the query
	q      []byte // the question section of the query as sent
	ch     chan datagram
}

// datagram is one reply for a waiter (b holds n bytes; cut: it was longer than the buffer), or the
// error that ends its wait (the socket was closed, or the resolver's port is unreachable).
type datagram struct {
	b   *[]byte
	n   int
	cut bool
	err error
}

// socketAge holds maxAge in nanoseconds.
var socketAge atomic.Int64

func init() { socketAge.Store(int64(maxAge)) }

var (
	dgramPool  = sync.Pool{New: func() any { b := make([]byte, udpReadBuf); return &b }}
	waiterPool = sync.Pool{New: func() any { return &waiter{ch: make(chan datagram, waiterQueue)} }}
)

// register takes a socket of the pair for a query and gives it a random ID from draw that no other
// query on that socket had, in flight or gone (O-10). wire is the packed query; the caller writes
// the ID into it.
func (u *upstream) register(wire []byte, draw func() uint16) (*waiter, error) {
	now := time.Now()
	u.mu.Lock()
	defer u.unlock()
	if u.closed {
		return nil, errClosed
	}
	s, err := u.pick(now)
	if err != nil {
		return nil, err
	}
	id := draw()
	for slices.Contains(s.ids[:s.sent], id) {
		id = draw() // fewer than maxUses of 65536 IDs are taken: this ends at once
	}
	s.ids[s.sent] = id // pick returns a socket with sent < maxUses
	s.sent++
	w := waiterPool.Get().(*waiter)
	w.s, w.id, w.opcode, w.q = s, id, wire[2]&0x78, append(w.q[:0], questionOf(wire)...)
	s.waiters[id] = w
	return w, nil
}

// pick returns the socket the next query takes: an idle one, else a new one while fewer than
// udpSockets are open, else the one with the fewest queries in flight. So a light load keeps one
// socket (and one reader) per pair, and a heavy one spreads over udpSockets source ports. A
// socket past maxUses or its age is retired on the way. Caller holds u.mu.
func (u *upstream) pick(now time.Time) (*udpSock, error) {
	best, free := -1, -1
	for i, s := range u.socks {
		if s != nil && (s.retired || s.sent >= maxUses || now.Sub(s.opened) >= time.Duration(socketAge.Load())) {
			u.retire(s)
			s = nil
		}
		switch {
		case s == nil:
			if free < 0 {
				free = i
			}
		case len(s.waiters) == 0:
			return s, nil
		case best < 0 || len(s.waiters) < len(u.socks[best].waiters):
			best = i
		}
	}
	if free < 0 {
		return u.socks[best], nil
	}
	s, err := u.open(now)
	if err != nil {
		return nil, err
	}
	u.socks[free] = s
	return s, nil
}

// open dials a new socket and starts its reader. Caller holds u.mu.
func (u *upstream) open(now time.Time) (*udpSock, error) {
	var laddr *net.UDPAddr
	if u.src.IsValid() {
		laddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(u.src, 0))
	}
	c, err := net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(u.dst))
	if err != nil {
		return nil, err
	}
	// Up to maxUses replies may arrive at once: room for them at the largest size we advertise,
	// within the system's limit (net.core.rmem_max).
	c.SetReadBuffer(readBuffer)
	// The reader wakes at maxAge and retires the socket if nothing else did.
	c.SetReadDeadline(now.Add(time.Duration(socketAge.Load())))
	s := &udpSock{u: u, c: c, opened: now, waiters: make(map[uint16]*waiter)}
	if u.socksOpen == nil {
		u.socksOpen = make(map[*udpSock]bool)
	}
	u.socksOpen[s] = true
	u.readers.Go(s.read)
	return s, nil
}

// retire stops s from taking queries; it closes now if nobody waits on it, else when the last
// waiter leaves. Caller holds u.mu.
func (u *upstream) retire(s *udpSock) {
	s.retired = true
	for i, t := range u.socks {
		if t == s {
			u.socks[i] = nil
		}
	}
	if len(s.waiters) == 0 {
		u.closeSock(s, nil)
	}
}

// closeSock closes s, ending the wait of the queries still on it with err (errClosed when nil),
// and so its reader. Caller holds u.mu and releases it with unlock, which closes the socket: a
// close waits for the reader to leave its read, which must not happen under the lock.
func (u *upstream) closeSock(s *udpSock, err error) {
	if s.closed {
		return
	}
	s.closed = true
	delete(u.socksOpen, s)
	for _, w := range s.waiters {
		w.fail(err)
	}
	u.closing = append(u.closing, s)
}

// unlock releases u.mu and closes the sockets closeSock marked.
func (u *upstream) unlock() {
	cs := u.closing
	u.closing = nil
	u.mu.Unlock()
	for _, s := range cs {
		s.c.Close()
	}
}

// fail ends w's wait with err, in the place kept for it. Caller holds u.mu.
func (w *waiter) fail(err error) {
	if err == nil {
		err = errClosed
	}
	select {
	case w.ch <- datagram{err: err}:
	default: // an error is already queued
	}
}

// leave takes w off its socket, closing the socket when it was retired and w was its last waiter,
// and gives back w and the datagrams it did not read.
func (w *waiter) leave() {
	s := w.s
	u := s.u
	u.mu.Lock()
	if s.waiters[w.id] == w {
		delete(s.waiters, w.id)
	}
	if s.retired && len(s.waiters) == 0 {
		u.closeSock(s, nil)
	}
	u.unlock()
	for {
		select {
		case d := <-w.ch:
			if d.b != nil {
				dgramPool.Put(d.b)
			}
			continue
		default:
		}
		break
	}
	w.s = nil
	waiterPool.Put(w)
}

// read is the socket's reader: it takes the datagrams that arrived, a batch at a time, and hands
// each to the query it answers (deliver). It ends when the socket is closed.
func (s *udpSock) read() {
	var (
		bufs [readBatch]*[]byte
		got  [readBatch]received
	)
	for i := range bufs {
		bufs[i] = dgramPool.Get().(*[]byte)
	}
	defer func() {
		for _, b := range bufs {
			dgramPool.Put(b)
		}
	}()
	r := newBatchReader(s.c)
	u := s.u
	for {
		n, err := r.read(bufs[:], got[:])
		if n > 0 {
			u.mu.Lock()
			for i, g := range got[:n] {
				if s.deliver(bufs[i], g.n, g.cut) {
					bufs[i] = dgramPool.Get().(*[]byte)
				}
			}
			u.mu.Unlock()
		}
		if err == nil {
			continue
		}
		u.mu.Lock()
		switch {
		case s.closed || errors.Is(err, net.ErrClosed):
			u.closeSock(s, nil)
			u.unlock()
			return
		case isTimeout(err):
			// maxAge: no more queries; it closes with its last waiter.
			u.retire(s)
			s.c.SetReadDeadline(time.Time{})
		case unreachable(err):
			s.failAll(err)
		default:
			u.retire(s)
			u.closeSock(s, err)
			u.unlock()
			return
		}
		u.unlock()
	}
}

// failAll fails every query on s at once with err, an ICMP port or host unreachable that came
// back for a query on it, rather than at their time: the resolver cannot be reached from here (a
// failure, as a per-query socket's read error was). The reader gets the error, or the next write
// on the socket does (sendUDP). Caller holds u.mu.
func (s *udpSock) failAll(err error) {
	for _, w := range s.waiters {
		w.fail(err)
	}
}

// received is what a read says of one datagram: its size in the buffer, and whether the buffer
// cut it.
type received struct {
	n   int
	cut bool
}

// deliver hands the datagram (*b)[:n] to the query it answers, and reports whether it did (the
// reader then takes a fresh buffer in its place). Only a datagram with the ID of a query in
// flight, the response bit and the query's opcode goes to that query, and only one the query's
// own match (attempt.match) could take: a reply to another question, a header-only reply without
// an error rcode, or one with several questions never reaches the query, so it neither ends its
// wait nor takes one of the few places kept for its datagrams ahead of the answer (O-10). Garbage
// with its ID does reach it (its match fails the attempt), as does a datagram the kernel cut (the
// query is asked again over TCP). Caller holds u.mu.
func (s *udpSock) deliver(b *[]byte, n int, cut bool) bool {
	msg := (*b)[:n]
	if len(msg) < 12 || msg[2]&0x80 == 0 {
		return false
	}
	w := s.waiters[binary.BigEndian.Uint16(msg)]
	if w == nil || msg[2]&0x78 != w.opcode {
		return false
	}
	other, known := false, false
	if binary.BigEndian.Uint16(msg[4:]) == 1 {
		other, known = otherQuestion(msg, w.q)
	}
	if other || !known && !cut && !mayAnswer(msg, w.q) {
		return false
	}
	if len(w.ch) >= waiterQueue-1 {
		return false
	}
	w.ch <- datagram{b: b, n: n, cut: cut}
	return true
}

// questionOf returns the question section of a packed query (one question, never compressed).
func questionOf(wire []byte) []byte {
	i := 12
	for i < len(wire) && wire[i] != 0 {
		i += 1 + int(wire[i])
	}
	return wire[12:min(i+5, len(wire))]
}

// otherQuestion reports whether the reply msg, whose question count is 1, asks another question
// than q: its name, read label by label, differs in more than ASCII case, or its type or class
// differs. known is false when the name cannot be read there (cut short, compressed).
func otherQuestion(msg, q []byte) (other, known bool) {
	i := 12
	for {
		if i >= len(msg) || msg[i]&0xC0 != 0 {
			return false, false
		}
		if msg[i] == 0 {
			break
		}
		i += 1 + int(msg[i])
	}
	end := i + 5
	if end > len(msg) {
		return false, false
	}
	a := msg[12:end]
	if len(a) != len(q) {
		return true, true
	}
	for k := range a {
		x, y := a[k], q[k]
		if k < len(a)-4 {
			x, y = lower(x), lower(y)
		}
		if x != y {
			return true, true
		}
	}
	return false, true
}

// mayAnswer reports whether the query's match could take msg, a datagram with its ID and opcode
// whose question the wire does not tell (none, several, a name not readable there): it does not
// parse (garbage, which fails the attempt; or a reply cut mid-record with TC, asked again over
// TCP), or it parses and answers the question q by the match's rule (answersQuestion). Only
// replies without one plain question come here, which are rare: the answers are not unpacked.
func mayAnswer(msg, q []byte) bool {
	m := new(dns.Msg)
	if m.Unpack(msg) != nil {
		return true
	}
	var want dns.Question
	name, off, err := dns.UnpackDomainName(q, 0)
	if err != nil || off+4 != len(q) {
		return true // our own query's question: not reached
	}
	want.Name, want.Qtype, want.Qclass = name, binary.BigEndian.Uint16(q[off:]), binary.BigEndian.Uint16(q[off+2:])
	return answersQuestion(m, want)
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
