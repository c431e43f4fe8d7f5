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
// keeps proxy's behaviours: pooled sockets; a pooled TCP connection the resolver closed while idle
// is redialled without counting a failure (proxy's ErrCachedClosed); out-of-order replies are
// skipped; a reply too large for the client reaches it truncated (proxy answers TC). And ours
// (O-10): a source address per endpoint, a fresh random ID per send, ID and question matched, a
// mismatched reply or garbage never ends the wait, a header-only error reply with the right ID is
// an answer, and a wait cut by a deadline can go on (hedging, O-6).
//
// Source-port policy (O-10): UDP sockets are connected sockets bound to SOURCE:0, so the kernel
// picks a random ephemeral port. A socket is reused for at most maxUses queries and never after
// sitting idle for idleExpire, so the source port keeps changing while the socket cost stays
// amortized. A socket whose attempt got no reply is closed, not reused. TCP connections are
// reused the same way, one query at a time.
const (
	maxUses    = 100
	idleExpire = 10 * time.Second
	// maxIdle bounds the idle sockets kept per protocol per (source, target). It is the default
	// max_concurrent: with fewer, a steady load with more queries in flight than idle sockets
	// opens and closes a socket for the excess on every query (a third more CPU per query under
	// dnsperf's 100 in flight when it was 64). Idle sockets past idleExpire are closed on put.
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

// conn is one pooled socket.
type conn struct {
	c      net.Conn
	tcp    bool
	cached bool // taken from the pool: the resolver may have closed it while it sat idle
	used   time.Time
	uses   int
}

// upstream is the socket pool from one source address to one target.
type upstream struct {
	src netip.Addr
	dst netip.AddrPort

	mu     sync.Mutex
	idle   [2][]*conn // 0: UDP, 1: TCP
	closed bool
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, readBuf); return &b }}

func (u *upstream) get(tcp bool, deadline time.Time) (*conn, error) {
	k := 0
	if tcp {
		k = 1
	}
	now := time.Now()
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil, errClosed
	}
	for n := len(u.idle[k]); n > 0; n = len(u.idle[k]) {
		c := u.idle[k][n-1]
		u.idle[k] = u.idle[k][:n-1]
		if now.Sub(c.used) > idleExpire {
			c.c.Close()
			continue
		}
		u.mu.Unlock()
		c.cached = true
		return c, nil
	}
	u.mu.Unlock()
	return u.dial(tcp, deadline)
}

func (u *upstream) dial(tcp bool, deadline time.Time) (*conn, error) {
	if tcp {
		d := net.Dialer{Deadline: deadline}
		if u.src.IsValid() {
			d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(u.src, 0))
		}
		c, err := d.Dial("tcp", u.dst.String())
		if err != nil {
			return nil, err
		}
		return &conn{c: c, tcp: true}, nil
	}
	var laddr *net.UDPAddr
	if u.src.IsValid() {
		laddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(u.src, 0))
	}
	c, err := net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(u.dst))
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
	k := 0
	if c.tcp {
		k = 1
	}
	u.mu.Lock()
	if u.closed || len(u.idle[k]) >= maxIdle {
		u.mu.Unlock()
		c.c.Close()
		return
	}
	// The stack is used from the top, so the oldest idle sockets sit at the bottom: close the
	// ones that expired, so a past burst does not hold its sockets for ever.
	var stale []*conn
	for len(u.idle[k]) > 0 && c.used.Sub(u.idle[k][0].used) > idleExpire {
		stale = append(stale, u.idle[k][0])
		u.idle[k] = u.idle[k][1:]
	}
	u.idle[k] = append(u.idle[k], c)
	u.mu.Unlock()
	for _, s := range stale {
		s.c.Close()
	}
}

func (u *upstream) close() {
	u.mu.Lock()
	u.closed = true
	idle := u.idle
	u.idle = [2][]*conn{}
	u.mu.Unlock()
	for _, cs := range idle {
		for _, c := range cs {
			c.c.Close()
		}
	}
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

	c    *conn
	id   uint16
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
}

// send writes the query on a socket of the pair with a fresh random ID (O-10). A pooled TCP
// connection that fails the write was closed by the resolver while idle: the next one is used.
func (a *attempt) send(deadline time.Time) error {
	for {
		c, err := a.p.up.get(a.tcp, deadline)
		if err != nil {
			return err
		}
		if err := a.setConn(c); err != nil {
			return err
		}
		a.id, a.got = newID(), 0
		binary.BigEndian.PutUint16(a.wire, a.id)
		c.c.SetWriteDeadline(deadline)
		if err = write(c, a.wire); err == nil {
			return nil
		}
		a.drop()
		if !c.cached {
			return err
		}
	}
}

func write(c *conn, wire []byte) error {
	if !c.tcp {
		_, err := c.c.Write(wire)
		return err
	}
	var l [2]byte
	binary.BigEndian.PutUint16(l[:], uint16(len(wire))) // #nosec G115 -- a packed query fits
	_, err := (&net.Buffers{l[:], wire}).WriteTo(c.c)
	return err
}

// wait reads until the reply whose ID and question match, or until deadline. Other replies and
// short garbage are skipped: they never end the wait (O-10); a reply with our ID that does not
// parse is the resolver's, and fails the attempt. At the deadline it returns errTimeout with the
// socket open, so the caller may wait longer. A truncated UDP reply is retried over TCP through
// the same pair; a pooled TCP connection found closed by the resolver is replaced and the query
// sent again (pkg/proxy's ErrCachedClosed), without counting a failure.
func (a *attempt) wait(deadline time.Time) error {
	if a.buf == nil {
		a.buf = bufPool.Get().(*[]byte)
	}
	if err := a.setDeadline(deadline); err != nil {
		return err
	}
	for {
		msg, err := a.read()
		if err != nil {
			if isTimeout(err) {
				if a.locked(func() error { return nil }) != nil {
					return errCancelled
				}
				return errTimeout
			}
			stale := a.tcp && a.c.cached && a.got == 0 && closedByPeer(err)
			a.drop()
			if !stale {
				return err
			}
		} else {
			m, err := a.match(msg)
			if err != nil {
				a.drop()
				return err
			}
			if m == nil {
				continue
			}
			if !m.Truncated || a.tcp {
				a.m, a.n = m, len(msg)
				c := a.c
				a.setConn(nil)
				a.p.up.put(c)
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

// read returns the next datagram, or over TCP the next length-prefixed message. The prefix is
// read into the buffer, then the message over it.
func (a *attempt) read() ([]byte, error) {
	buf := *a.buf
	if !a.tcp {
		n, err := a.c.c.Read(buf)
		return buf[:n], err
	}
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
// TCP (pkg/proxy's shouldTruncateResponse).
func (a *attempt) match(msg []byte) (*dns.Msg, error) {
	if len(msg) < 12 || binary.BigEndian.Uint16(msg) != a.id || msg[2]&0x80 == 0 || (msg[2]^a.wire[2])&0x78 != 0 {
		return nil, nil
	}
	m := new(dns.Msg)
	if err := m.Unpack(msg); err != nil {
		if !a.tcp && m.Truncated {
			return m, nil
		}
		return nil, errMalformed
	}
	if len(m.Question) == 1 && questionMatches(m.Question[0], a.q) || len(m.Question) == 0 && headerOnlyError(m.Rcode) {
		return m, nil
	}
	return nil, nil
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

// setConn sets the attempt's socket under the lock cancel takes. Once the attempt is cancelled
// a new socket is refused (closed).
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

// drop closes the attempt's socket: after an error or without a reply it is not reused.
func (a *attempt) drop() {
	if a.c != nil {
		a.c.c.Close()
		a.setConn(nil)
	}
}

func (a *attempt) setDeadline(d time.Time) error {
	return a.locked(func() error { return a.c.c.SetReadDeadline(d) })
}

// cancel ends the wait of an attempt listening in its own goroutine.
func (a *attempt) cancel() {
	a.ctl.mu.Lock()
	defer a.ctl.mu.Unlock()
	a.ctl.cancelled = true
	if a.c != nil {
		a.c.c.SetReadDeadline(time.Unix(1, 0))
	}
}

// close gives back what the attempt holds; a socket still open got no reply and is not reused.
func (a *attempt) close() {
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
