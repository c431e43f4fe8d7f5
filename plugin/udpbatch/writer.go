package udpbatch

import (
	"github.com/miekg/dns"
)

// writer is miekg/dns's writer of one UDP answer, decorated. It embeds miekg/dns's writer, whose
// other methods it keeps.
type writer struct {
	dns.ResponseWriter
	s   *socket
	l   *layout // of the embedded writer's type
	seq uint64  // this query's number among the socket's arrivals
}

// Write implements dns.Writer: miekg/dns's WriteMsg calls it with the packed answer.
func (w *writer) Write(b []byte) (int, error) { return w.s.write(w, b) }

// decorate is the socket's dns.DecorateWriter, applied to miekg/dns's writer of every query.
func (s *socket) decorate(w dns.Writer) dns.Writer {
	rw, ok := w.(dns.ResponseWriter)
	l := layoutFor(w)
	if !ok || !l.ok {
		s.mu.Lock()
		if !s.warned {
			s.warned = true
			log.Warningf("Batching is off on %s: miekg/dns's UDP writer %T is not the one udpbatch knows (fields udp, udpSession; another miekg/dns version?); answers are written one by one, as without udpbatch", s.server, w)
		}
		s.mu.Unlock()
		return w
	}
	return &writer{ResponseWriter: rw, s: s, l: l, seq: s.arrivals.Add(1)}
}
