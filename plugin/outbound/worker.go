package outbound

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Queries are served on long-lived worker goroutines (README, "Transport"). miekg/dns starts a
// goroutine per UDP query with a small stack; forwarding a query goes deep enough (pack, hedging,
// the answer's pack and write) that the runtime copies that stack to a larger one on every
// query: 9 to 14 % of the CPU of outbound and of forward in live profiles under dnsperf, more than
// the two goroutine switches of a hand-off to a worker whose stack has grown once. A worker
// that sits idle for workerIdle exits, and every worker exits once the block stopped and its query
// (if any) is answered: a query still in flight at a reload is not waited for.
const workerIdle = 10 * time.Second

// serveFunc serves a query of ours; zone is the zone ServeDNS matched it in.
type serveFunc func(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, zone string) (int, error)

// workers are the worker goroutines of one block.
type workers struct {
	serve serveFunc
	jobs  chan *job // unbuffered: a send succeeds only when an idle worker takes it

	mu      sync.Mutex
	stopped bool
	quit    chan struct{}
	started atomic.Int64 // workers started, for tests
}

// job is one query handed to a worker, and what serving it returned.
type job struct {
	ctx   context.Context
	w     dns.ResponseWriter
	r     *dns.Msg
	zone  string
	rc    int
	err   error
	panic any
	done  chan struct{}
}

var jobPool = sync.Pool{New: func() any { return &job{done: make(chan struct{}, 1)} }}

// run serves the query on a worker and returns what serve returned. A panic in serve is raised
// again here, in the server's goroutine, where CoreDNS recovers it. After stop the query is served
// in the caller's goroutine.
func (ws *workers) run(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, zone string) (int, error) {
	j := jobPool.Get().(*job)
	j.ctx, j.w, j.r, j.zone = ctx, w, r, zone
	select {
	case ws.jobs <- j:
	default:
		ws.mu.Lock()
		if ws.stopped {
			ws.mu.Unlock()
			j.ctx, j.w, j.r = nil, nil, nil
			jobPool.Put(j)
			return ws.serve(ctx, w, r, zone)
		}
		ws.mu.Unlock()
		ws.started.Add(1)
		go ws.work(j)
	}
	<-j.done
	rc, err, p := j.rc, j.err, j.panic
	j.ctx, j.w, j.r, j.err, j.panic = nil, nil, nil, nil, nil
	jobPool.Put(j)
	if p != nil {
		panic(p)
	}
	return rc, err
}

// work serves j, then the jobs it takes, until it sits idle for workerIdle or the block stops.
func (ws *workers) work(j *job) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		j.serve(ws.serve)
		idle.Reset(workerIdle)
		select {
		case j = <-ws.jobs:
		case <-idle.C:
			return
		case <-ws.quit:
			return
		}
	}
}

func (j *job) serve(serve serveFunc) {
	defer func() {
		if p := recover(); p != nil {
			j.panic = p
		}
		j.done <- struct{}{}
	}()
	j.rc, j.err = serve(j.ctx, j.w, j.r, j.zone)
}

// stop ends the idle workers; a busy one ends after its query. Queries after stop are served in
// their own goroutine.
func (ws *workers) stop() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if !ws.stopped {
		ws.stopped = true
		close(ws.quit)
	}
}

func newWorkers(serve serveFunc) *workers {
	return &workers{serve: serve, jobs: make(chan *job), quit: make(chan struct{})}
}
