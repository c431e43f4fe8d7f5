package udpbatch

// When a handler becomes the sender it may yield the processor once (runtime.Gosched), so that
// the handlers already runnable queue their answers and leave in its batch. On one processor that
// is the only way a batch forms; on several, answers also queue while a sendmmsg is in progress.
// A yield costs a lone answer its wait behind whatever else is runnable (a GC worker, a zone
// reload: up to a scheduler time slice, 10 ms), so it happens only when it can pay: when other
// queries of the socket are under way (received since this one, or waiting unread), and not
// right after yields that no answer joined.

// maxBackoff is the most senders in a row that do not yield after a yield that no other answer
// joined.
const maxBackoff = 255

// wantYield says whether the handler that becomes the sender should first let the handlers
// already runnable queue their answers (on one processor they run now, on several meanwhile).
// A query that came alone (no query received on this socket since, none waiting in its receive
// queue) never waits: nothing would join it. After a yield that no answer joined, the next
// senders do not yield (1, 3, 7 ... up to maxBackoff of them): the other queries were not
// runnable (waiting on an upstream), and a yield can put the sender behind a goroutine that holds
// the processor for a time slice. Called by the sender.
func (s *socket) wantYield(seq uint64) bool {
	if s.arrivals.Load() == seq && !s.unreadQueries() {
		return false
	}
	if s.skip > 0 {
		s.skip--
		return false
	}
	return true
}

// yielded records whether joined answers came during a yield. Called with mu held.
func (s *socket) yielded(joined int) {
	if joined > 0 {
		s.backoff, s.skip = 0, 0
		return
	}
	s.backoff = min(2*s.backoff+1, maxBackoff)
	s.skip = s.backoff
}
