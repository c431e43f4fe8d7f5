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
	"time"

	"github.com/miekg/dns"
)

// The transport is ours rather than plugin/pkg/proxy's: proxy can bind a local address, but it
// matches replies by ID only (a reply with the right ID and another question ends the wait, and
// forward then answers FORMERR), and it has no per-attempt deadline shorter than its 2 s read
// timeout. O-10 wants mismatched replies dropped while the wait goes on.
//
// Source-port policy (O-10): UDP sockets are connected sockets bound to SOURCE:0, so the kernel
// picks a random ephemeral port. A socket is reused for at most maxUses queries and never after
// sitting idle for idleExpire, then closed, so the source port keeps changing while the socket
// cost stays amortized. A socket that timed out is closed rather than reused, so a late reply
// cannot meet a later query (which would drop it anyway: its ID is fresh). TCP connections are reused the same way, one query at a time.
const (
	maxUses    = 100
	idleExpire = 10 * time.Second
	// maxIdle bounds the idle sockets kept per protocol per (source, target). It is the default
	// max_concurrent: with fewer, a steady load with more queries in flight than idle sockets
	// opens and closes a socket for the excess on every query (a third more CPU per query under
	// dnsperf's 100 in flight when it was 64). Idle sockets past idleExpire are closed on put.
	maxIdle    = 1000
	udpBufSize = 1232
	readBuf    = 65535
)

var (
	errTimeout   = errors.New("timeout")
	errClosed    = errors.New("transport closed")
	errMalformed = errors.New("malformed reply")
)

// conn is one pooled socket.
type conn struct {
	c    net.Conn
	tcp  bool
	used time.Time
	uses int
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

// exchange sends wire (a packed query whose ID it overwrites with a fresh random one, O-10) and
// waits until deadline for the reply whose ID and question match q. Replies that do not match,
// and garbage, are dropped and the wait goes on. A truncated UDP reply is retried over TCP.
// It returns the reply, its size on the wire and whether TCP carried it.
func (u *upstream) exchange(wire []byte, q dns.Question, tcp bool, deadline time.Time) (*dns.Msg, int, bool, error) {
	m, n, err := u.exchangeOnce(wire, q, tcp, deadline)
	if err == nil && m.Truncated && !tcp {
		tcp = true
		m, n, err = u.exchangeOnce(wire, q, tcp, deadline)
	}
	return m, n, tcp, err
}

func (u *upstream) exchangeOnce(wire []byte, q dns.Question, tcp bool, deadline time.Time) (*dns.Msg, int, error) {
	c, err := u.get(tcp, deadline)
	if err != nil {
		return nil, 0, err
	}
	id := newID()
	binary.BigEndian.PutUint16(wire, id)
	c.c.SetDeadline(deadline)

	if tcp {
		var l [2]byte
		binary.BigEndian.PutUint16(l[:], uint16(len(wire))) // #nosec G115 -- a packed query fits
		if _, err := (&net.Buffers{l[:], wire}).WriteTo(c.c); err != nil {
			c.c.Close()
			return nil, 0, err
		}
	} else if _, err := c.c.Write(wire); err != nil {
		c.c.Close()
		return nil, 0, err
	}

	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	sawGarbage := false
	for {
		var n int
		if tcp {
			n, err = readTCP(c.c, buf)
		} else {
			n, err = c.c.Read(buf)
		}
		if err != nil {
			c.c.Close()
			if isTimeout(err) {
				if sawGarbage {
					return nil, 0, errMalformed
				}
				return nil, 0, errTimeout
			}
			return nil, 0, err
		}
		if n < 12 || binary.BigEndian.Uint16(buf) != id || buf[2]&0x80 == 0 {
			sawGarbage = sawGarbage || n < 12
			continue
		}
		m := new(dns.Msg)
		if err := m.Unpack(buf[:n]); err != nil {
			sawGarbage = true
			continue
		}
		if !questionMatches(m, q) {
			continue
		}
		if m.Truncated && !tcp {
			c.c.Close() // the rest of this reply is not coming over UDP
		} else {
			u.put(c)
		}
		return m, n, nil
	}
}

func readTCP(c net.Conn, buf []byte) (int, error) {
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return 0, err
	}
	n := int(binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, buf[:n]); err != nil {
		return 0, err
	}
	return n, nil
}

func questionMatches(m *dns.Msg, q dns.Question) bool {
	if len(m.Question) != 1 {
		return false
	}
	a := m.Question[0]
	// Case is compared loosely: resolvers may echo 0x20-mixed names.
	return a.Qtype == q.Qtype && a.Qclass == q.Qclass && strings.EqualFold(a.Name, q.Name)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
