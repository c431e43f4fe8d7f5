package health

import (
	"net/netip"
	"sync"
	"testing"
	"time"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestBoard() (*Board, *fakeClock) {
	c := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	return NewBoard(c.now), c
}

var addr1 = netip.MustParseAddr("192.0.2.1")

// held returns the target b holds for k, or nil.
func held(b *Board, k Key) *Target {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.targets[k]
}

// H-1: states Unknown, Healthy, Unhealthy with the time and reason of the last change.
func TestStatesWithTimeAndReason(t *testing.T) {
	b, clock := newTestBoard()
	tg := b.Acquire(Key{Check: "web", Addr: addr1})
	if got := tg.State(); got != Unknown {
		t.Fatalf("new target state = %v, want unknown", got)
	}
	start := tg.Status().Since

	clock.advance(time.Minute)
	if !b.Set(tg, Healthy, "3/3 regions healthy") {
		t.Fatal("Set to healthy reported no change")
	}
	st := tg.Status()
	if st.State != Healthy || st.Reason != "3/3 regions healthy" || !st.Since.Equal(start.Add(time.Minute)) {
		t.Fatalf("status = %+v", st)
	}

	// The same state again keeps the time and reason of the last change.
	clock.advance(time.Minute)
	if b.Set(tg, Healthy, "again") {
		t.Fatal("Set to the same state reported a change")
	}
	if st2 := tg.Status(); st2 != st {
		t.Fatalf("status changed on a repeated state: %+v -> %+v", st, st2)
	}

	clock.advance(time.Minute)
	b.Set(tg, Unhealthy, "connection refused")
	if st := tg.Status(); st.State != Unhealthy || st.Reason != "connection refused" || !st.Since.Equal(start.Add(3*time.Minute)) {
		t.Fatalf("status = %+v", st)
	}
}

// H-1: Restate is Set, except that the same state again replaces the reason (the time of the
// last change stays, and no subscriber hears of it): a fleet's verdict says what it is made of now.
func TestRestateReplacesReason(t *testing.T) {
	b, clock := newTestBoard()
	tg := b.Acquire(Key{Check: "web", Addr: addr1})
	var changes []Change
	defer b.Subscribe(func(c Change) { changes = append(changes, c) })()
	if !b.Restate(tg, Healthy, "fleet: 2/3 regions healthy") {
		t.Fatal("Restate to healthy reported no change")
	}
	since := tg.Status().Since
	clock.advance(time.Minute)
	if b.Restate(tg, Healthy, "1/1 regions healthy") {
		t.Fatal("Restate to the same state reported a change")
	}
	if st := tg.Status(); st.State != Healthy || st.Reason != "1/1 regions healthy" || !st.Since.Equal(since) {
		t.Fatalf("status = %+v, want the new reason and the time of the last change", st)
	}
	if len(changes) != 1 {
		t.Fatalf("%d changes told, want 1 (the reason alone is no change)", len(changes))
	}
}

// H-2: Unknown is served as healthy; Decided tells readiness whether a verdict came.
func TestUnknownIsServed(t *testing.T) {
	b, _ := newTestBoard()
	tg := b.Acquire(Key{Check: "web", Addr: addr1})
	if !tg.Healthy() {
		t.Fatal("unknown target is not served")
	}
	if tg.Decided() {
		t.Fatal("unknown target counts as decided")
	}
	b.Set(tg, Unhealthy, "down")
	if tg.Healthy() || !tg.Decided() {
		t.Fatalf("unhealthy target: healthy=%v decided=%v", tg.Healthy(), tg.Decided())
	}
	b.Set(tg, Healthy, "up")
	if !tg.Healthy() {
		t.Fatal("healthy target not served")
	}
}

// H-3: every consumer of one (check, address) shares one target.
func TestOneTargetPerKey(t *testing.T) {
	b, _ := newTestBoard()
	k := Key{Check: "web", Addr: addr1}
	t1 := b.Acquire(k)
	t2 := b.Acquire(k)
	if t1 != t2 {
		t.Fatal("two acquisitions of one key gave two targets")
	}
	if other := b.Acquire(Key{Check: "tcp", Addr: addr1}); other == t1 {
		t.Fatal("another check on the same address shares the target")
	}
	if lb := b.Acquire(Key{Addr: addr1}); lb == t1 {
		t.Fatal("the derived key shares the probed target")
	}
	if port := b.Acquire(Key{Check: "web", Addr: addr1, Port: 8080}); port == t1 {
		t.Fatal("a target with its own port shares the check-port target")
	}
}

// H-4: a reload acquires before it releases, so verdicts survive; the last release drops the target.
func TestReloadKeepsState(t *testing.T) {
	b, _ := newTestBoard()
	k := Key{Check: "web", Addr: addr1}
	old := b.Acquire(k)
	b.Set(old, Unhealthy, "down")

	// New instance starts, then the old one shuts down.
	next := b.Acquire(k)
	b.Release(old)
	if next.State() != Unhealthy {
		t.Fatalf("state after reload = %v, want unhealthy", next.State())
	}
	if held(b, k) != next {
		t.Fatal("target gone after reload")
	}

	b.Release(next)
	if held(b, k) != nil {
		t.Fatal("target still on the board after its last release")
	}
	if again := b.Acquire(k); again.State() != Unknown {
		t.Fatalf("a target removed and added again starts %v, want unknown", again.State())
	}
}

func TestCheckedFollowsPublishers(t *testing.T) {
	b, _ := newTestBoard()
	tg := b.Acquire(Key{Addr: addr1})
	if tg.Checked() {
		t.Fatal("unpublished target counts as checked")
	}
	b.Publish(tg)
	b.Publish(tg)
	b.Unpublish(tg)
	if !tg.Checked() {
		t.Fatal("target with one publisher left is not checked")
	}
	b.Unpublish(tg)
	if tg.Checked() {
		t.Fatal("target with no publisher counts as checked")
	}
}

func TestSubscribe(t *testing.T) {
	b, _ := newTestBoard()
	tg := b.Acquire(Key{Check: "web", Addr: addr1})
	var got []Change
	cancel := b.Subscribe(func(c Change) { got = append(got, c) })
	b.Set(tg, Healthy, "up")
	b.Set(tg, Healthy, "up again")
	b.Set(tg, Unhealthy, "down")
	cancel()
	b.Set(tg, Healthy, "up")
	if len(got) != 2 {
		t.Fatalf("got %d changes, want 2: %+v", len(got), got)
	}
	if got[1].Old.State != Healthy || got[1].New.State != Unhealthy || got[1].Key != tg.Key() {
		t.Fatalf("second change = %+v", got[1])
	}
}

// A subscriber may write the board (pschealth derives a composite from the changes it is told).
func TestSubscriberMayWrite(t *testing.T) {
	b, _ := newTestBoard()
	src := b.Acquire(Key{Check: "web", Addr: addr1})
	derived := b.Acquire(Key{Addr: netip.MustParseAddr("198.51.100.1")})
	cancel := b.Subscribe(func(c Change) {
		if c.Key == src.Key() {
			b.Set(derived, c.New.State, "follows "+c.Key.String())
		}
	})
	defer cancel()
	done := make(chan struct{})
	go func() {
		// A concurrent Subscribe must not deadlock against the nested notify.
		for range 100 {
			b.Subscribe(func(Change) {})()
		}
		close(done)
	}()
	for i := range 1000 {
		b.Set(src, State(1+i%2), "flip")
	}
	<-done
	if derived.State() != src.State() {
		t.Fatalf("derived %v, source %v", derived.State(), src.State())
	}
}

// H-5: readers never block on writers; run with -race.
func TestConcurrentReadersAndWriters(t *testing.T) {
	b, _ := newTestBoard()
	keys := make([]Key, 16)
	targets := make([]*Target, len(keys))
	for i := range keys {
		keys[i] = Key{Check: "web", Addr: netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})}
		targets[i] = b.Acquire(keys[i])
	}
	cancel := b.Subscribe(func(Change) {})
	defer cancel()

	stop := make(chan struct{})
	var writers sync.WaitGroup
	for w := range 4 {
		writers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tg := targets[(i+w)%len(targets)]
				if i%2 == 0 {
					b.Set(tg, Healthy, "up")
				} else {
					b.Set(tg, Unhealthy, "down")
				}
				// Churn references the way reloads do.
				extra := b.Acquire(keys[i%len(keys)])
				b.Release(extra)
			}
		})
	}
	var readers sync.WaitGroup
	for range 4 {
		readers.Go(func() {
			for i := range 100000 {
				tg := targets[i%len(targets)]
				_ = tg.Healthy()
				_ = tg.Checked()
				_ = tg.Status()
				if held(b, keys[i%len(keys)]) != tg {
					t.Error("lookup returned another target while it was held")
					return
				}
			}
		})
	}
	readers.Wait()
	close(stop)
	writers.Wait()
}

func BenchmarkTargetHealthy(b *testing.B) {
	board := NewBoard(time.Now)
	tg := board.Acquire(Key{Check: "web", Addr: addr1})
	board.Set(tg, Healthy, "up")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !tg.Healthy() || tg.Checked() {
				b.Fatal("wrong state")
			}
		}
	})
}

// S-1: the status page lists the board's targets, ordered, with their states, and a released
// target is gone from the list.
func TestTargetsEnumeration(t *testing.T) {
	b := NewBoard(time.Now)
	k1 := Key{Check: "web", Addr: netip.MustParseAddr("10.0.0.2")}
	k2 := Key{Check: "web", Addr: netip.MustParseAddr("10.0.0.1"), Port: 8080}
	k3 := Key{Addr: netip.MustParseAddr("10.9.9.9")}
	k4 := Key{Check: "web", Addr: netip.MustParseAddr("10.0.0.1")}
	t1, t2, t3, t4 := b.Acquire(k1), b.Acquire(k2), b.Acquire(k3), b.Acquire(k4)
	b.Set(t1, Unhealthy, "down")
	got := b.Targets()
	want := []Key{k3, k4, k2, k1}
	if len(got) != len(want) {
		t.Fatalf("Targets() = %d targets, want %d", len(got), len(want))
	}
	for i, k := range want {
		if got[i].Key() != k {
			t.Errorf("Targets()[%d] = %v, want %v", i, got[i].Key(), k)
		}
	}
	if got[3].Status().Reason != "down" {
		t.Errorf("reason = %q, want down", got[3].Status().Reason)
	}
	b.Release(t2)
	if n := len(b.Targets()); n != 3 {
		t.Errorf("after a release: %d targets, want 3", n)
	}
	b.Release(t1)
	b.Release(t3)
	b.Release(t4)
	if n := len(b.Targets()); n != 0 {
		t.Errorf("after every release: %d targets, want 0", n)
	}
}
