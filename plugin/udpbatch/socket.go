package udpbatch

import (
	"errors"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/ipv4"
)

// Answers waiting for the sender, per socket, beyond which a handler writes its own answer as
// miekg/dns does: memory stays bounded and an overloaded socket degrades to stock behaviour.
const queueLimit = 1024

// An answer kept under this many bytes keeps its slot's buffer for the next one; a larger one
// (rare over UDP) gets its own, freed once sent.
const keepBuffer = 2048

// Distinct received control messages (one per local address a wildcard listener is asked on)
// whose reply control message is remembered.
const oobCacheSize = 64

// socket batches the answers of one UDP listener socket. Every answer is queued; the handler
// that finds no sender becomes it (no timer, no hand-off to another goroutine): it lets the
// handlers already runnable queue theirs, then sends the queue, max answers per sendmmsg. Idle,
// a batch is one answer sent at once; under load batches grow with the load.
type socket struct {
	server string
	max    int
	m      socketMetrics

	mu      sync.Mutex
	idle    sync.Cond // signalled when busy turns false on a closed socket
	busy    bool      // a sender (a handler or the sender goroutine) sends the queue
	off     bool      // write directly: the instance shut down, or the sender failed
	pending []entry   // answers waiting for the sender
	spare   []entry   // the sender's previous batch: its buffers are reused
	src     *net.UDPConn
	oobs    map[string][]byte // received control message -> reply control message
	senders sync.WaitGroup

	out *net.UDPConn // our duplicate of src: queued answers still go out after miekg/dns closed src
	pc  *ipv4.PacketConn

	// Owned by the sender (whoever holds busy).
	msgs    []ipv4.Message
	sending int // answers of the batch being sent not sent yet
	errs    errorLog
}

var errNoProgress = errors.New("sendmmsg sent nothing")

type entry struct {
	buf  []byte
	addr net.Addr
	oob  []byte
}

type socketMetrics struct {
	direct, queued, overflow, errors prometheus.Counter
	sizes                            prometheus.Observer
}

func newSocket(server string, max int) *socket {
	s := &socket{
		server:  server,
		max:     max,
		pending: make([]entry, 0, queueLimit),
		spare:   make([]entry, 0, queueLimit),
		oobs:    make(map[string][]byte),
		msgs:    make([]ipv4.Message, max),
		m: socketMetrics{
			direct:   writesTotal.WithLabelValues(server, "direct"),
			queued:   writesTotal.WithLabelValues(server, "queued"),
			overflow: writesTotal.WithLabelValues(server, "overflow"),
			errors:   writeErrorsTotal.WithLabelValues(server),
			sizes:    batchSize.WithLabelValues(server),
		},
	}
	s.idle.L = &s.mu
	for i := range s.msgs {
		s.msgs[i].Buffers = make([][]byte, 1)
	}
	return s
}

// write queues the packed answer b that miekg/dns's writer w would write. The writer that finds
// no one sending becomes the sender: it yields the processor once, so the handlers already
// runnable queue their answers (on one processor they run now; on several they run meanwhile),
// then sends what is queued with one sendmmsg. Idle, that is its own answer alone, sent at once.
func (s *socket) write(w dns.Writer, b []byte) (int, error) {
	conn, raddr, oob, ok := session(w)
	s.mu.Lock()
	switch {
	case !ok || s.off || (s.src != nil && conn != s.src):
		s.mu.Unlock()
		s.m.direct.Inc()
		return w.Write(b)
	case len(s.pending) == cap(s.pending):
		s.mu.Unlock()
		s.m.overflow.Inc()
		return w.Write(b)
	case s.pc == nil && !s.open(conn):
		s.mu.Unlock()
		s.m.direct.Inc()
		return w.Write(b)
	}
	n := len(s.pending)
	s.pending = s.pending[:n+1]
	e := &s.pending[n]
	if cap(e.buf) >= len(b) {
		e.buf = append(e.buf[:0], b...)
	} else {
		e.buf = append([]byte(nil), b...)
	}
	e.addr, e.oob = raddr, s.replyOOB(oob)
	send := !s.busy
	s.busy = true
	s.mu.Unlock()
	s.m.queued.Inc()
	if send {
		runtime.Gosched()
		s.flush()
	}
	return len(b), nil
}

// replyOOB returns replyOOB(oob), remembered per socket: a listener is asked on few addresses.
// Called with mu held.
func (s *socket) replyOOB(oob []byte) []byte {
	if r, ok := s.oobs[string(oob)]; ok {
		return r
	}
	r := replyOOB(oob)
	if len(s.oobs) < oobCacheSize {
		s.oobs[string(oob)] = r
	}
	return r
}

// flush sends the queue as its sender, in the handler goroutine that became it: two rounds at
// most (its own, and what queued during it), then a sender goroutine takes over and the handler
// returns.
func (s *socket) flush() {
	defer s.recoverSender()
	if s.drain(2) {
		return
	}
	s.mu.Lock()
	if s.off {
		// Shutting down: nobody starts a goroutine now; drain here.
		s.mu.Unlock()
		s.drain(-1)
		return
	}
	s.senders.Add(1)
	s.mu.Unlock()
	go s.sender()
}

// setIdle clears busy. Called with mu held.
func (s *socket) setIdle() {
	s.busy = false
	if s.off {
		s.idle.Broadcast()
	}
}

func (s *socket) sender() {
	defer s.senders.Done()
	defer s.recoverSender()
	s.drain(-1)
}

// recoverSender keeps a panicking sender from taking the server down, or leaving the socket busy
// for ever: answers are written directly from then on, and what was queued is counted as lost.
func (s *socket) recoverSender() {
	r := recover()
	if r == nil {
		return
	}
	log.Errorf("Recovered panic in the UDP sender of %s, answers are written one by one from now on: %v", s.server, r)
	s.mu.Lock()
	lost := len(s.pending) + s.sending
	s.pending, s.sending = s.pending[:0], 0
	s.off = true
	s.setIdle()
	s.mu.Unlock()
	s.m.errors.Add(float64(lost))
}

// drain sends what is queued, a round (all that is queued) at a time. It returns true, with busy
// cleared, once the queue is empty, or false, busy kept, when rounds rounds were sent and more
// is queued (rounds < 0: no limit).
func (s *socket) drain(rounds int) bool {
	s.mu.Lock()
	for i := 0; len(s.pending) > 0; i++ {
		if i == rounds {
			s.mu.Unlock()
			return false
		}
		batch := s.pending
		s.pending = s.spare[:0]
		s.mu.Unlock()

		s.sending = len(batch)
		for rest := batch; len(rest) > 0; {
			n := min(len(rest), s.max)
			s.send(rest[:n])
			rest = rest[n:]
			s.sending -= n
		}
		s.spare = recycle(batch)
		s.mu.Lock()
	}
	s.setIdle()
	s.mu.Unlock()
	return true
}

// recycle drops the references a sent batch holds and returns its backing array for reuse.
func recycle(sent []entry) []entry {
	for i := range sent {
		e := &sent[i]
		e.addr, e.oob = nil, nil
		if cap(e.buf) > keepBuffer {
			e.buf = nil
		}
	}
	return sent[:0]
}

// send writes up to max answers with sendmmsg.
func (s *socket) send(batch []entry) {
	ms := s.msgs[:len(batch)]
	for i, e := range batch {
		ms[i].Buffers[0], ms[i].OOB, ms[i].Addr = e.buf, e.oob, e.addr
	}
	for len(ms) > 0 {
		n, err := s.pc.WriteBatch(ms, 0)
		if err == nil && n <= 0 {
			err = errNoProgress
		}
		if err != nil {
			// sendmmsg fails only when its first message cannot be sent: that answer is lost,
			// the rest are tried again.
			s.failed(err)
			n = 1
		} else {
			s.m.sizes.Observe(float64(n))
		}
		ms = ms[n:]
	}
	for i := range batch {
		s.msgs[i].Buffers[0], s.msgs[i].OOB, s.msgs[i].Addr = nil, nil, nil
	}
}

// open duplicates miekg/dns's socket src for the sender, at the first answer queued. The
// duplicate is the same socket (same bound address and port, same options), but miekg/dns closing
// its descriptor when the server stops, right after the last handler returned, does not close
// ours: queued answers still go out, also on a reload that hands the socket to the next instance.
// When it cannot be had, the socket is not batched. Called with mu held.
func (s *socket) open(src *net.UDPConn) bool {
	out, err := duplicate(src)
	if err != nil {
		log.Warningf("Cannot duplicate the UDP socket of %s, answers are written one by one: %v", s.server, err)
		s.off = true
		return false
	}
	s.src, s.out, s.pc = src, out, ipv4.NewPacketConn(out)
	return true
}

// failed counts and logs an answer the sender could not send.
func (s *socket) failed(err error) {
	s.m.errors.Inc()
	s.errs.log(s.server, err)
}

// close stops batching: later answers are written directly, what is queued is sent, and the
// duplicate socket is closed once the sender is done.
func (s *socket) close() {
	s.mu.Lock()
	s.off = true
	for s.busy {
		s.idle.Wait()
	}
	out := s.out
	s.out, s.pc = nil, nil
	s.mu.Unlock()
	s.senders.Wait()
	if out != nil {
		out.Close()
	}
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
