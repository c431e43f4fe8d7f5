package outbound

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/test"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
	"go.uber.org/goleak"
)

// Queries go to long-lived workers: one after the other they reuse one worker (no goroutine per
// query), at once they get a worker each, and every query gets what serve returned.
func TestWorkersReused(t *testing.T) {
	snapshot := goleak.IgnoreCurrent()
	release := make(chan struct{})
	ws := newWorkers(func(_ context.Context, _ dns.ResponseWriter, r *dns.Msg, _ string) (int, error) {
		if r.Id == 1 {
			<-release
		}
		return int(r.Id), nil
	})
	spawned := &ws.started
	ask := func(id uint16) int {
		m := new(dns.Msg)
		m.Id = id
		rc, _ := ws.run(context.Background(), &test.ResponseWriter{}, m, "example.")
		return rc
	}
	for i := range 20 {
		if rc := ask(uint16(100 + i)); rc != 100+i {
			t.Fatalf("query %d: serve returned %d", 100+i, rc)
		}
	}
	if n := spawned.Load(); n != 1 {
		t.Errorf("20 queries one after the other started %d workers, want 1", n)
	}
	// 10 queries at once, each held until released: 10 workers.
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { ask(1) })
	}
	deadline := time.Now().Add(5 * time.Second)
	for spawned.Load() < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers for 10 queries at once", spawned.Load())
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	ws.stop()
	if rc := ask(7); rc != 7 {
		t.Errorf("a query after stop: %d", rc)
	}
	coretest.NoLeak(t, snapshot)
}

// A panic while serving a query is raised again in the server's goroutine, where CoreDNS's
// recover turns it into SERVFAIL; it does not kill the process from a worker.
func TestWorkerPanicReachesTheServer(t *testing.T) {
	ws := newWorkers(func(context.Context, dns.ResponseWriter, *dns.Msg, string) (int, error) { panic("boom") })
	defer ws.stop()
	got := func() (p any) {
		defer func() { p = recover() }()
		ws.run(context.Background(), &test.ResponseWriter{}, new(dns.Msg), "example.")
		return nil
	}()
	if got != "boom" {
		t.Errorf("recovered %v, want the panic of serve", got)
	}
	// The worker survived and serves the next query.
	ws.serve = func(context.Context, dns.ResponseWriter, *dns.Msg, string) (int, error) { return 3, nil }
	if rc, _ := ws.run(context.Background(), &test.ResponseWriter{}, new(dns.Msg), "example."); rc != 3 {
		t.Errorf("after a panic: %d", rc)
	}
}
