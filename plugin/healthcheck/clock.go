package healthcheck

import "time"

// Clock is the time source of the scheduler and of the threshold logic. Tests inject a clock
// they advance by hand, so intervals and thresholds are tested in milliseconds.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the scheduler uses.
type Timer interface {
	C() <-chan time.Time
	Reset(d time.Duration)
	Stop()
}

// realClock is the wall clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return &realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r *realTimer) C() <-chan time.Time { return r.t.C }

// Reset relies on Go 1.23 timers: Stop and Reset discard a pending value, so no drain is needed.
func (r *realTimer) Reset(d time.Duration) { r.t.Reset(d) }

func (r *realTimer) Stop() { r.t.Stop() }
