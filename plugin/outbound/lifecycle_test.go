package outbound

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
	"go.uber.org/goleak"
)

// Goroutines start in OnStartup and stop in OnShutdown: a reload and a stop leave nothing behind.
func TestReloadNoLeak(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	// The harness's first start loads every plugin package once; do it before the snapshot.
	warm, err := coretest.New("warm.:0 {\nbind 127.0.0.1\nwhoami\n}")
	if err != nil {
		t.Fatal(err)
	}
	warm.Stop()
	snapshot := goleak.IgnoreCurrent()

	s, err := coretest.New(twoEndpoints(r.addr, ""))
	if err != nil {
		t.Fatal(err)
	}
	mustQuery(t, s, "127.0.1.1", "a.example.")
	if err := s.Reload(twoEndpoints(r.addr, "timeout 2s")); err != nil {
		t.Fatal(err)
	}
	mustQuery(t, s, "127.0.2.1", "b.example.")
	if err := s.Reload(twoEndpoints(r.addr, "")); err != nil {
		t.Fatal(err)
	}
	mustQuery(t, s, "127.0.1.1", "c.example.")
	s.Stop()
	coretest.NoLeak(t, append(coretest.ServerLoops(), snapshot)...)
}

// H-6 across a reload: no series of a zone the reload removes is exported once the old instance's
// last query has ended, even a query still in flight past the 5 s CoreDNS waits for them (its
// timeout is 10 s, the resolver answers at 5.5 s): the query holds its ranker, and the series go
// with the last holder, after its attempt is recorded. Was: the series were deleted at the old
// instance's shutdown, and the late attempt re-created them for good.
func TestH6InflightQueryAfterReload(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	r.setDelay(5500 * time.Millisecond) // past dnsserver's 5 s grace
	keep := "keep.example.:0 {\n\tbind 127.0.0.1\n\twhoami\n}\n"
	gone := "gone.example.:0 {\n\tbind 127.0.0.1\n\toutbound {\n\t\tto " + r.addr + "\n\t\tprivate 127.0.0.0/8\n\t\ttimeout 10s\n\t}\n}\n"
	s := coretest.Start(t, keep+gone)
	done := make(chan error, 1)
	go func() {
		c := &dns.Client{Timeout: 7 * time.Second}
		m := new(dns.Msg)
		m.SetQuestion("slow.gone.example.", dns.TypeA)
		_, _, err := c.Exchange(m, s.UDP)
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for r.asked("slow.gone.example.") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the query never reached the resolver")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := s.Reload(keep); err != nil {
		t.Fatal(err)
	}
	zone := map[string]string{"zone": "gone.example."}
	if n := seriesCount(t, zone); n != 0 {
		t.Logf("%d series of gone.example. right after the reload", n)
	}
	<-done
	// The old instance's handler records its attempt when the resolver answers.
	deadline = time.Now().Add(3 * time.Second)
	for seriesCount(t, zone) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := seriesCount(t, zone); n != 0 {
		t.Errorf("H-6: %d series of gone.example., a zone the live Corefile no longer has, are exported after the old instance's in-flight query ended", n)
	}
}

// Shutdown mid-query: hedged queries in flight when the block stops (a reload) finish, leave no
// goroutine behind and race with nothing (run with -race).
func TestH6StopMidHedge(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	r.slowDown(netip.MustParseAddr("127.0.0.11"), 700*time.Millisecond)
	r.slowDown(netip.MustParseAddr("127.0.0.12"), 700*time.Millisecond)
	o := newHandler(t, twoPaths(r.addr, "timeout 2s"))
	o.start()
	snapshot := goleakSnapshot()
	var wg sync.WaitGroup
	rcodes := make([]int, 30)
	for i := range rcodes {
		wg.Go(func() {
			m, _ := serveMeta(t, o, fmt.Sprintf("s%d.example.", i))
			rcodes[i] = m.Rcode
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.count("127.0.0.12") < len(rcodes) { // every query's hedge is out
		if time.Now().After(deadline) {
			t.Fatalf("%d hedges reached the resolver", r.count("127.0.0.12"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	o.stop()
	wg.Wait()
	t.Logf("rcodes after a stop mid-hedge: %v", rcodes)
	goleakVerify(t, snapshot)
}

func goleakSnapshot() goleak.Option { return goleak.IgnoreCurrent() }

func goleakVerify(t *testing.T, snapshot goleak.Option) {
	t.Helper()
	coretest.NoLeak(t, snapshot, goleak.IgnoreAnyFunction("github.com/miekg/dns.(*Server).serveUDPPacket"), goleak.IgnoreAnyFunction("time.Sleep"))
}
