// Package udpbatch sends the UDP answers of a server block with as few system calls as the load
// allows. It decorates miekg/dns's UDP writer (dnsserver.Config.UDPDecorateWriterFunc, as the
// in-tree shed plugin does): answers are queued, and the handler that finds no one sending lets
// the handlers already runnable queue theirs, then sends them all with one sendmmsg, each with its
// own source address (the session's IP_PKTINFO / IPV6_PKTINFO). Idle, an answer leaves alone and
// at once; under load, batches grow with the load. No timer. It answers no query itself.
package udpbatch

import (
	"sync"

	"github.com/coredns/coredns/core/dnsserver"

	"github.com/miekg/dns"
)

// UDPBatch is one udpbatch directive: the sockets of the servers it decorates.
type UDPBatch struct {
	// Max is the largest number of answers sent with one sendmmsg.
	Max int

	mu      sync.Mutex
	closed  bool
	sockets []*socket
}

// New returns a UDPBatch with the default batch size.
func New() *UDPBatch { return &UDPBatch{Max: defaultMax} }

// decorator is installed as Config.UDPDecorateWriterFunc: dnsserver calls it once per UDP
// listener socket when the socket starts serving; miekg/dns applies what it returns to the writer
// of every query.
func (u *UDPBatch) decorator(srv *dnsserver.Server) dns.DecorateWriter {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		// A server that starts after its instance shut down (a reload racing its start) writes
		// as miekg/dns does: nothing would stop a sender of ours.
		return nil
	}
	s := newSocket(srv.Address(), u.Max)
	u.sockets = append(u.sockets, s)
	return func(w dns.Writer) dns.Writer { return &writer{s: s, w: w} }
}

// OnShutdown stops batching on every socket of this instance: queued answers are sent, later
// ones written directly, and no goroutine of ours outlives it.
func (u *UDPBatch) OnShutdown() error {
	u.mu.Lock()
	u.closed = true
	sockets := u.sockets
	u.sockets = nil
	u.mu.Unlock()
	for _, s := range sockets {
		s.close()
	}
	return nil
}

// writer is miekg/dns's writer of one answer, decorated.
type writer struct {
	s *socket
	w dns.Writer
}

// Write implements dns.Writer.
func (w *writer) Write(b []byte) (int, error) { return w.s.write(w.w, b) }
