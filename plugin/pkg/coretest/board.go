package coretest

import (
	"sync/atomic"

	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// OnBoard returns the status of k on b and whether something publishes it (a probe, a load
// balancer, a composite). It holds k only while it looks.
func OnBoard(b *health.Board, k health.Key) (health.Status, bool) {
	t := b.Acquire(k)
	defer b.Release(t)
	return t.Status(), t.Checked()
}

// marks numbers the keys Held acquires to read a board's clock: keys no consumer can name (their
// address is invalid), one per call, so two calls at once do not share one (the port wraps).
var marks atomic.Uint32

// Held reports whether something held k on b before this call: a board reference that was not
// given back. Acquire gives a key it creates the board's current time as its Since, so Held first
// creates a mark to read that clock, then looks at k: a k created by the look is no older than the
// mark, a k somebody held has not changed since an earlier time (nothing writes a target its
// writers gave back). b's clock must move forward between two calls (time.Now, or a counter).
func Held(b *health.Board, k health.Key) bool {
	mark := b.Acquire(health.Key{Check: "coretest.Held", Port: uint16(marks.Add(1) & 0xffff)})
	defer b.Release(mark)
	st, _ := OnBoard(b, k)
	return st.Since.Before(mark.Status().Since)
}
