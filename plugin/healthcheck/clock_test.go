package healthcheck

import (
	"sync"
	"time"
)

// fakeClock is a Clock advanced by hand.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, c: make(chan time.Time, 1), at: f.now.Add(d), armed: true}
	f.timers = append(f.timers, t)
	return t
}

// Advance moves the clock by d and fires the timers that are due.
func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	for _, t := range f.timers {
		if t.armed && !t.at.After(f.now) {
			t.armed = false
			select {
			case t.c <- f.now:
			default:
			}
		}
	}
}

type fakeTimer struct {
	f     *fakeClock
	c     chan time.Time
	at    time.Time
	armed bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Reset(d time.Duration) {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	select { // like Go 1.23 timers: no stale value after Reset
	case <-t.c:
	default:
	}
	t.at = t.f.now.Add(d)
	t.armed = true
	if !t.at.After(t.f.now) {
		t.armed = false
		t.c <- t.f.now
	}
}

func (t *fakeTimer) Stop() {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.armed = false
	select {
	case <-t.c:
	default:
	}
}
