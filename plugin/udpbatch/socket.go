package udpbatch

import (
	"errors"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/udpanswer"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/ipv4"
)

// Answers waiting for a sender, per socket, beyond which a handler writes its own answer as
// miekg/dns does. Each waiting answer is a handler waiting: the bound keeps one batch's wait
// (and the arrays behind it) bounded.
const queueLimit = 1024

// socket batches the answers of one UDP listener socket, by group commit: a handler queues its
// answer and waits until it has been sent. The handler that finds no one sending becomes the
// sender: it sends what is queued with sendmmsg (max answers per call), tells each waiting
// handler how its answer fared, and hands the answers queued meanwhile to one of their handlers.
// No goroutine, no timer, no descriptor of its own: every answer is sent by a handler of its
// batch while miekg/dns waits for that handler, on miekg/dns's own socket.
type socket struct {
	server string
	max    int
	m      socketMetrics
	yield  func() // runtime.Gosched; tests count the calls

	// arrivals counts the queries of this socket whose writer was decorated: a sender compares
	// it with its own query's number to see whether others came in while it was handled.
	arrivals atomic.Uint64

	mu      sync.Mutex
	busy    bool     // a handler is sending a batch
	off     bool     // a sender panicked: answers are written directly from then on
	pending *batch   // answers waiting for a sender
	free    []*batch // sent batches whose handlers all read their result
	conn    *net.UDPConn
	pc      *ipv4.PacketConn // conn, for WriteBatch
	warned  bool             // the line saying why batching is off was logged

	// Owned by the sender (whoever set busy).
	msgs    []ipv4.Message
	errs    errorLog
	backoff int // senders that will not yield after the next useless yield
	skip    int // senders left that do not yield
	rc      syscall.RawConn
	inqFn   func(fd uintptr) // reads the receive queue's next datagram size into inq
	inq     int
	inqErr  error
}

// batch is the answers one sender sends, and what their handlers wait on.
type batch struct {
	entries []entry
	// cond (L is the socket's mu) is broadcast when the batch has been sent, and signalled when
	// the batch waits for one of its handlers to send it.
	cond   sync.Cond
	sent   bool
	unread int // handlers that have not read their result yet
}

// entry is one queued answer. Nothing of miekg/dns's session is kept: the client's address is
// copied, and the reply control message is ours.
type entry struct {
	buf  []byte // the handler's packed answer; valid until its Write returns
	addr netip.AddrPort
	oob  []byte
	err  error // the result, set by the sender

	ua net.UDPAddr // addr, as WriteBatch takes it; set by the sender
	ip [16]byte    // ua.IP's array
}

var (
	errNoProgress = errors.New("sendmmsg sent nothing")
	errNotSent    = errors.New("udpbatch: answer not sent: its sender failed")
)

type socketMetrics struct {
	direct, queued, overflow, errors prometheus.Counter
	sizes                            prometheus.Observer
}

func newSocket(server string, max int) *socket {
	s := &socket{
		server: server,
		max:    max,
		yield:  runtime.Gosched,
		msgs:   make([]ipv4.Message, max),
		m: socketMetrics{
			direct:   writesTotal.WithLabelValues(server, "direct"),
			queued:   writesTotal.WithLabelValues(server, "queued"),
			overflow: writesTotal.WithLabelValues(server, "overflow"),
			errors:   writeErrorsTotal.WithLabelValues(server),
			sizes:    batchSize.WithLabelValues(server),
		},
	}
	s.pending = s.newBatch()
	for i := range s.msgs {
		s.msgs[i].Buffers = make([][]byte, 1)
	}
	return s
}

// newBatch returns an empty batch, reusing a sent one when all its handlers are done with it.
// Called with mu held.
func (s *socket) newBatch() *batch {
	if n := len(s.free); n > 0 {
		b := s.free[n-1]
		s.free = s.free[:n-1]
		return b
	}
	b := &batch{entries: make([]entry, 0, s.max)}
	b.cond.L = &s.mu
	return b
}

// write sends the packed answer b of w's query, in a batch, and returns when it has been sent
// (or could not be), with its own result, as miekg/dns's Write does.
func (s *socket) write(w *writer, b []byte) (int, error) {
	conn := w.l.Conn(w.ResponseWriter)
	ua, _ := w.RemoteAddr().(*net.UDPAddr)
	s.mu.Lock()
	switch {
	case s.off || conn == nil || ua == nil || (s.conn != nil && conn != s.conn):
		s.directLocked(conn == nil)
		s.mu.Unlock()
		return w.ResponseWriter.Write(b)
	case len(s.pending.entries) == queueLimit:
		s.mu.Unlock()
		s.m.overflow.Inc()
		return w.ResponseWriter.Write(b)
	case s.conn == nil:
		s.conn, s.pc = conn, ipv4.NewPacketConn(conn)
		s.rc, _ = conn.SyscallConn()
	}
	bt := s.pending
	i := len(bt.entries)
	bt.entries = append(bt.entries, entry{buf: b, addr: ua.AddrPort(), oob: udpanswer.Reply(w.l.OOB(w.ResponseWriter)), err: errNotSent})
	// Counted before it is sent: a client that has its answer sees it counted.
	s.m.queued.Inc()
	if !s.busy {
		s.busy = true
		s.mu.Unlock()
		yield := s.wantYield(w.seq)
		if yield {
			s.yield()
		}
		s.mu.Lock()
		if yield {
			s.yielded(len(bt.entries) - 1)
		}
		s.sendPending()
	}
	for !bt.sent {
		if !s.busy && s.pending == bt {
			// The previous sender is done and handed this batch on: send it.
			s.busy = true
			s.sendPending()
			break
		}
		bt.cond.Wait()
	}
	err := bt.entries[i].err
	s.release(bt)
	s.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return len(b), nil
}

// directLocked counts an answer its handler writes itself, and says once per socket why, when
// the socket is one that cannot be batched.
func (s *socket) directLocked(proxied bool) {
	s.m.direct.Inc()
	if proxied && !s.warned {
		s.warned = true
		log.Infof("Batching is off on %s: its listener is no plain UDP socket (PROXY protocol?); answers are written one by one, as without udpbatch", s.server)
	}
}

// sendPending sends the pending batch as its sender. Called with mu held and busy set by the
// caller; returns with mu held and busy cleared, the batch's handlers woken, and the answers
// queued meanwhile handed to one of their handlers.
func (s *socket) sendPending() {
	bt := s.pending
	s.pending = s.newBatch()
	bt.unread = len(bt.entries)
	if len(bt.entries) > 1 {
		// Answers queue by themselves: let the next senders yield again.
		s.backoff, s.skip = 0, 0
	}
	s.mu.Unlock()
	s.sendRecovering(bt.entries)
	s.mu.Lock()
	bt.sent = true
	s.busy = false
	bt.cond.Broadcast()
	if len(s.pending.entries) > 0 {
		s.pending.cond.Signal()
	}
}

// release records that a handler of bt has read its result; the last one gives bt back.
// Called with mu held.
func (s *socket) release(bt *batch) {
	bt.unread--
	if bt.unread > 0 {
		return
	}
	for i := range bt.entries {
		bt.entries[i] = entry{}
	}
	bt.entries = bt.entries[:0]
	bt.sent = false
	s.free = append(s.free, bt)
}

// sendRecovering sends es, max answers per sendmmsg. A panic does not take the server down or
// leave handlers waiting for ever: the answers not sent fail, later ones are written directly.
func (s *socket) sendRecovering(es []entry) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		log.Errorf("Recovered panic in the UDP sender of %s, answers are written one by one from now on: %v", s.server, r)
		lost := 0
		for i := range es {
			if es[i].err == errNotSent {
				lost++
			}
		}
		s.m.errors.Add(float64(lost))
		s.mu.Lock()
		s.off = true
		s.mu.Unlock()
	}()
	for len(es) > 0 {
		n := min(len(es), s.max)
		s.send(es[:n])
		es = es[n:]
	}
}

// send writes up to max answers with sendmmsg and sets each one's result.
func (s *socket) send(es []entry) {
	ms := s.msgs[:len(es)]
	for i := range es {
		e := &es[i]
		a := e.addr.Addr()
		e.ip = a.As16()
		e.ua.IP = e.ip[:]
		if a.Is4() {
			e.ua.IP = e.ip[12:]
		}
		e.ua.Port, e.ua.Zone = int(e.addr.Port()), a.Zone()
		ms[i].Buffers[0], ms[i].OOB, ms[i].Addr = e.buf, e.oob, &e.ua
	}
	for k := 0; k < len(ms); {
		n, err := s.pc.WriteBatch(ms[k:], 0)
		if err == nil && n <= 0 {
			err = errNoProgress
		}
		switch {
		case err == nil:
			s.m.sizes.Observe(float64(n))
			for i := k; i < k+n; i++ {
				es[i].err = nil
			}
			k += n
		case errors.Is(err, net.ErrClosed):
			// The server gave up waiting for its handlers (its grace time) and closed the
			// socket: nothing more can be sent.
			for i := k; i < len(es); i++ {
				es[i].err = err
				s.failed(err)
			}
			k = len(ms)
		default:
			// sendmmsg fails only when its first message cannot be sent: that answer fails,
			// the rest are tried again.
			es[k].err = err
			s.failed(err)
			k++
		}
	}
	for i := range ms {
		ms[i].Buffers[0], ms[i].OOB, ms[i].Addr = nil, nil, nil
	}
}

// failed counts and logs an answer that could not be sent.
func (s *socket) failed(err error) {
	s.m.errors.Inc()
	s.errs.log(s.server, err)
}

// errorLog logs send failures at most once a second per socket, with how many there were.
type errorLog struct {
	last    time.Time
	skipped int
}

func (l *errorLog) log(server string, err error) {
	now := time.Now()
	if now.Sub(l.last) < time.Second {
		l.skipped++
		return
	}
	if l.skipped > 0 {
		log.Warningf("Failed to send a queued answer on %s (and %d more since the last message): %v", server, l.skipped, err)
	} else {
		log.Warningf("Failed to send a queued answer on %s: %v", server, err)
	}
	l.last, l.skipped = now, 0
}
