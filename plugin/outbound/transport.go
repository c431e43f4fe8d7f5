package outbound

import (
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// The transport is ours rather than plugin/pkg/proxy's (README, "Wire behaviour", says why). It
// keeps proxy's behaviours: pooled TCP connections; a pooled TCP connection the resolver closed
// while idle is redialled without counting a failure (proxy's ErrCachedClosed); out-of-order
// replies are skipped; a reply too large for the client reaches it truncated (proxy answers TC).
// And ours (O-10): a source address per endpoint, a fresh random ID per send, ID and question
// matched, a mismatched reply or garbage never ends the wait, a header-only error reply with the
// right ID is an answer, and a wait cut by a deadline can go on (hedging, O-6).
//
// UDP goes through a few shared sockets per pair, each read by one goroutine (udp.go says how and
// why). TCP connections are pooled, one query at a time: a connection is reused for at most
// maxUses queries and never after sitting idle for idleExpire; one whose attempt got no reply is
// closed, not reused.
const (
	// maxUses bounds the queries a UDP socket or a TCP connection carries before a new one, with
	// a new source port, takes its place.
	maxUses    = 100
	idleExpire = 10 * time.Second
	// maxIdle bounds the idle TCP connections kept per (source, target). It is the default
	// max_concurrent, so a steady load reuses its connections. Idle ones past idleExpire are
	// closed on put.
	maxIdle    = 1000
	udpBufSize = 1232
	readBuf    = dns.MaxMsgSize
)

var (
	errTimeout   = errors.New("timeout")
	errClosed    = errors.New("transport closed")
	errMalformed = errors.New("malformed reply")
	errCancelled = errors.New("cancelled: another attempt answered")
)

// conn is one pooled TCP connection.
type conn struct {
	c      net.Conn
	cached bool // taken from the pool: the resolver may have closed it while it sat idle
	used   time.Time
	uses   int
}

// upstream is the transport from one source address to one target: its UDP sockets (udp.go) and
// its pool of TCP connections.
type upstream struct {
	src netip.Addr
	dst netip.AddrPort

	mu        sync.Mutex
	idle      []*conn
	socks     [udpSockets]*udpSock // the UDP sockets that take queries
	socksOpen map[*udpSock]bool    // every UDP socket still open, retired ones included
	closing   []*udpSock           // closed by unlock
	readers   sync.WaitGroup
	closed    bool
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, readBuf); return &b }}

// get returns a pooled TCP connection, or dials one.
func (u *upstream) get(deadline time.Time) (*conn, error) {
	now := time.Now()
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil, errClosed
	}
	for n := len(u.idle); n > 0; n = len(u.idle) {
		c := u.idle[n-1]
		u.idle = u.idle[:n-1]
		if now.Sub(c.used) > idleExpire {
			c.c.Close()
			continue
		}
		u.mu.Unlock()
		c.cached = true
		return c, nil
	}
	u.mu.Unlock()
	d := net.Dialer{Deadline: deadline}
	if u.src.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(u.src, 0))
	}
	c, err := d.Dial("tcp", u.dst.String())
	if err != nil {
		return nil, err
	}
	return &conn{c: c}, nil
}

func (u *upstream) put(c *conn) {
	c.uses++
	if c.uses >= maxUses {
		c.c.Close()
		return
	}
	c.used = time.Now()
	u.mu.Lock()
	if u.closed || len(u.idle) >= maxIdle {
		u.mu.Unlock()
		c.c.Close()
		return
	}
	// The stack is used from the top, so the oldest idle connections sit at the bottom: close
	// the ones that expired, so a past burst does not hold them for ever.
	var stale []*conn
	for len(u.idle) > 0 && c.used.Sub(u.idle[0].used) > idleExpire {
		stale = append(stale, u.idle[0])
		u.idle = u.idle[1:]
	}
	u.idle = append(u.idle, c)
	u.mu.Unlock()
	for _, s := range stale {
		s.c.Close()
	}
}

// close closes the pair's sockets, ending the wait of the queries on its UDP sockets with
// errClosed, and waits for their readers.
func (u *upstream) close() {
	u.mu.Lock()
	u.closed = true
	idle := u.idle
	u.idle = nil
	for s := range u.socksOpen {
		u.closeSock(s, errClosed)
	}
	u.socks = [udpSockets]*udpSock{}
	u.unlock()
	for _, c := range idle {
		c.c.Close()
	}
	u.readers.Wait()
}

// newID returns a fresh random message ID (O-10). math/rand/v2's generator is ChaCha8 seeded from
// the operating system, per thread: as unpredictable to a spoofer as dns.Id's crypto/rand, without
// a reflective binary.Read and a system call on every query (9 % of outbound's CPU in a live
// profile under dnsperf).
func newID() uint16 { return uint16(rand.Uint32()) } //nolint:gosec // the low 16 bits of a ChaCha8 draw

// attempt is one query sent through one pair. It listens until the reply that matches it, a
// deadline, or its cancellation when another attempt of the same query answered first.
type attempt struct {
	p      *pair
	i, nth int // the pair's index in its ranker; the attempt's rank in its query
	q      dns.Question
	wire   []byte // the packed query; every send writes a fresh ID into it
	tcp    bool
	start  time.Time
	hedge  time.Time // when the next path may be tried (O-6)
	id     uint16

	w  *waiter  // UDP: the attempt's place on a socket of the pair
	dg datagram // UDP: the datagram being looked at

	c    *conn // TCP
	buf  *[]byte
	got  int // TCP: bytes of the current message read so far, prefix included, so a read cut
	size int // by a deadline resumes; size is the message's length, from its prefix

	ctl *attemptCtl // set when the attempt listens in its own goroutine (hedging)

	m   *dns.Msg // the reply
	n   int      // its size on the wire
	err error    // why there is no reply
}

// attemptCtl lets the query cancel an attempt that listens in its own goroutine.
type attemptCtl struct {
	mu        sync.Mutex
	cancelled bool
	stop      chan struct{} // closed by cancel: ends a UDP wait
}

func newCtl() *attemptCtl { return &attemptCtl{stop: make(chan struct{})} }

// send sends the query through the pair with a fresh random ID (O-10): over UDP on one of the
// pair's sockets, over TCP on a pooled connection. A pooled TCP connection that fails the write
// was closed by the resolver while idle: the next one is used.
func (a *attempt) send(deadline time.Time) error {
	if !a.tcp {
		return a.sendUDP()
	}
	for {
		c, err := a.p.up.get(deadline)
		if err != nil {
			return err
		}
		if err := a.setConn(c); err != nil {
			return err
		}
		a.id, a.got = newID(), 0
		binary.BigEndian.PutUint16(a.wire, a.id)
		c.c.SetWriteDeadline(deadline)
		if err = writeTCP(c, a.wire); err == nil {
			return nil
		}
		a.drop()
		if !c.cached {
			return err
		}
	}
}

// sendUDP takes a place on a socket of the pair, with an ID no other query on it has, and sends.
func (a *attempt) sendUDP() error {
	w, err := a.p.up.register(a.wire, newID)
	if err != nil {
		return err
	}
	if a.ctl != nil {
		a.ctl.mu.Lock()
		cancelled := a.ctl.cancelled
		a.ctl.mu.Unlock()
		if cancelled {
			w.leave()
			return errCancelled
		}
	}
	a.w, a.id = w, w.id
	binary.BigEndian.PutUint16(a.wire, a.id)
	if _, err := w.s.c.Write(a.wire); err != nil {
		if unreachable(err) {
			// The ICMP error an earlier query left on the socket (Linux gives it to the next
			// send as to the next read): the reader will not see it, so the queries there are
			// told here.
			u := w.s.u
			u.mu.Lock()
			w.s.failAll(err)
			u.mu.Unlock()
		}
		a.drop()
		if errors.Is(err, net.ErrClosed) {
			return errClosed
		}
		return err
	}
	return nil
}

func writeTCP(c *conn, wire []byte) error {
	var l [2]byte
	binary.BigEndian.PutUint16(l[:], uint16(len(wire))) // #nosec G115 -- a packed query fits
	_, err := (&net.Buffers{l[:], wire}).WriteTo(c.c)
	return err
}

// wait reads until the reply whose ID and question match, or until deadline. Other replies and
// short garbage are skipped: they never end the wait (O-10); a reply with our ID that does not
// parse is the resolver's, and fails the attempt. At the deadline it returns errTimeout still
// listening, so the caller may wait longer. A truncated UDP reply is retried over TCP through the
// same pair; a pooled TCP connection found closed by the resolver is replaced and the query sent
// again (pkg/proxy's ErrCachedClosed), without counting a failure.
func (a *attempt) wait(deadline time.Time) error {
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
			timerPool.Put(t)
		}
	}()
	if a.tcp {
		if err := a.setDeadline(deadline); err != nil {
			return err
		}
	}
	for {
		var (
			msg []byte
			cut bool
			err error
		)
		if a.tcp {
			msg, err = a.readTCP()
			if isTimeout(err) {
				err = errTimeout
				if a.locked(func() error { return nil }) != nil {
					err = errCancelled
				}
			}
		} else {
			if t == nil {
				t = timerPool.Get().(*time.Timer)
				t.Reset(time.Until(deadline))
			}
			msg, cut, err = a.readUDP(t)
		}
		if err == errTimeout || err == errCancelled {
			return err
		}
		if err != nil {
			stale := a.tcp && a.c.cached && a.got == 0 && closedByPeer(err)
			a.drop()
			if !stale {
				return err
			}
		} else {
			m, err := a.match(msg, cut)
			n := len(msg)
			a.release()
			if err != nil {
				a.drop()
				return err
			}
			if m == nil {
				continue
			}
			if !m.Truncated || a.tcp {
				a.m, a.n = m, n
				if a.tcp {
					c := a.c
					a.setConn(nil)
					a.p.up.put(c)
				} else {
					a.drop() // leaves the socket to the others
				}
				return nil
			}
			a.drop() // the rest of this reply is not coming over UDP
			a.tcp = true
		}
		if err := a.send(deadline); err != nil {
			return err
		}
		if err := a.setDeadline(deadline); err != nil {
			return err
		}
	}
}

// timerPool holds the timers of UDP waits, stopped.
var timerPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// readUDP returns the next datagram the socket's reader handed to this attempt (cut: longer than
// the reader's buffer), the error that ended its wait (the socket closed, the resolver
// unreachable), errTimeout when t fires, or errCancelled.
func (a *attempt) readUDP(t *time.Timer) ([]byte, bool, error) {
	var stop chan struct{}
	if a.ctl != nil {
		stop = a.ctl.stop
	}
	select {
	case d := <-a.w.ch:
		if d.err != nil {
			return nil, false, d.err
		}
		a.dg = d
		return (*d.b)[:d.n], d.cut, nil
	case <-t.C:
		if a.locked(func() error { return nil }) != nil {
			return nil, false, errCancelled
		}
		return nil, false, errTimeout
	case <-stop:
		return nil, false, errCancelled
	}
}

// release gives back the buffer of the datagram just looked at.
func (a *attempt) release() {
	if a.dg.b != nil {
		dgramPool.Put(a.dg.b)
		a.dg = datagram{}
	}
}

// readTCP returns the next length-prefixed message. The prefix is read into the buffer, then the
// message over it.
func (a *attempt) readTCP() ([]byte, error) {
	if a.buf == nil {
		a.buf = bufPool.Get().(*[]byte)
	}
	buf := *a.buf
	for {
		if a.got == 2 {
			a.size = int(binary.BigEndian.Uint16(buf))
		}
		if a.got >= 2 && a.got-2 == a.size {
			a.got = 0
			return buf[:a.size], nil
		}
		from, to := a.got, 2
		if a.got >= 2 {
			from, to = a.got-2, a.size
		}
		n, err := a.c.c.Read(buf[from:to])
		a.got += n
		if err != nil {
			return nil, err
		}
	}
}

// match returns the reply in msg if it answers this attempt (O-10): the ID, the response bit, the
// opcode and the question match; a header-only reply (no question) with the right ID is an answer
// only with an error rcode (FORMERR, SERVFAIL, NOTIMP, REFUSED: legal there, and what forward's
// request.Match would turn into FORMERR). A reply with our ID that does not parse is errMalformed,
// unless it came over UDP with TC set: a reply cut mid-record, which the TC path asks again over
// TCP (pkg/proxy's shouldTruncateResponse). A datagram longer than the socket reader's buffer
// (cut) is taken for a truncated reply likewise: TCP brings it whole.
func (a *attempt) match(msg []byte, cut bool) (*dns.Msg, error) {
	if len(msg) < 12 || binary.BigEndian.Uint16(msg) != a.id || msg[2]&0x80 == 0 || (msg[2]^a.wire[2])&0x78 != 0 {
		return nil, nil
	}
	m := new(dns.Msg)
	if err := m.Unpack(msg); err != nil || cut {
		if !a.tcp && (m.Truncated || cut) {
			m.Truncated = true
			return m, nil
		}
		return nil, errMalformed
	}
	if answersQuestion(m, a.q) {
		return m, nil
	}
	return nil, nil
}

// answersQuestion reports whether the reply m, with the query's ID and opcode, answers the
// question q (O-10): its one question is q, or it has none and an error rcode. The socket's
// reader keeps to it too (mayAnswer): what fails it never reaches the query.
func answersQuestion(m *dns.Msg, q dns.Question) bool {
	return len(m.Question) == 1 && questionMatches(m.Question[0], q) || len(m.Question) == 0 && headerOnlyError(m.Rcode)
}

func headerOnlyError(rc int) bool {
	return rc == dns.RcodeFormatError || rc == dns.RcodeServerFailure || rc == dns.RcodeNotImplemented || rc == dns.RcodeRefused
}

// locked runs f unless the attempt was cancelled, under the lock that orders it with cancel, so a
// socket or a deadline set by f is never set after the cancellation.
func (a *attempt) locked(f func() error) error {
	if a.ctl == nil {
		return f()
	}
	a.ctl.mu.Lock()
	defer a.ctl.mu.Unlock()
	if a.ctl.cancelled {
		return errCancelled
	}
	return f()
}

// setConn sets the attempt's TCP connection under the lock cancel takes. Once the attempt is
// cancelled a new connection is refused (closed).
func (a *attempt) setConn(c *conn) error {
	if a.ctl != nil {
		a.ctl.mu.Lock()
		defer a.ctl.mu.Unlock()
		if a.ctl.cancelled && c != nil {
			c.c.Close()
			return errCancelled
		}
	}
	a.c = c
	return nil
}

// drop leaves the attempt's UDP socket, or closes its TCP connection: after an error or without a
// reply it is not reused.
func (a *attempt) drop() {
	if a.w != nil {
		a.w.leave()
		a.w = nil
	}
	if a.c != nil {
		a.c.c.Close()
		a.setConn(nil)
	}
}

func (a *attempt) setDeadline(d time.Time) error {
	if !a.tcp {
		return nil
	}
	return a.locked(func() error { return a.c.c.SetReadDeadline(d) })
}

// cancel ends the wait of an attempt listening in its own goroutine.
func (a *attempt) cancel() {
	a.ctl.mu.Lock()
	defer a.ctl.mu.Unlock()
	if a.ctl.cancelled {
		return
	}
	a.ctl.cancelled = true
	close(a.ctl.stop)
	if a.c != nil {
		a.c.c.SetReadDeadline(time.Unix(1, 0))
	}
}

// close gives back what the attempt holds; a TCP connection still open got no reply and is not
// reused.
func (a *attempt) close() {
	a.release()
	a.drop()
	if a.buf != nil {
		bufPool.Put(a.buf)
		a.buf = nil
	}
}

// questionMatches compares loosely on case: resolvers may echo 0x20-mixed names.
func questionMatches(a, q dns.Question) bool {
	return a.Qtype == q.Qtype && a.Qclass == q.Qclass && strings.EqualFold(a.Name, q.Name)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// closedByPeer tells an idle connection the resolver closed (EOF, reset) from other errors.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
