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

// workers are the worker goroutines of one block. An idle worker waits on its own channel, which
// it puts on the ready stack before it hands back the answer of its last query: so a query that
// follows another always finds the worker that served it, and serial queries keep one worker.
type workers struct {
	serve serveFunc

	mu      sync.Mutex
	ready   []chan *job // idle workers, the most recently idle last
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
	ws.mu.Lock()
	if ws.stopped {
		ws.mu.Unlock()
		return ws.serve(ctx, w, r, zone)
	}
	var idle chan *job
	if n := len(ws.ready); n > 0 {
		idle = ws.ready[n-1]
		ws.ready[n-1] = nil
		ws.ready = ws.ready[:n-1]
	}
	ws.mu.Unlock()

	j := jobPool.Get().(*job)
	j.ctx, j.w, j.r, j.zone = ctx, w, r, zone
	if idle != nil {
		idle <- j // buffered, and the worker is idle: it never blocks
	} else {
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

// work serves j, then the jobs it is handed, until it sits idle for workerIdle or the block stops.
func (ws *workers) work(j *job) {
	in := make(chan *job, 1)
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		j.serve(ws.serve)
		// Ready again before the caller learns the answer: the query it sends next finds us.
		stay := ws.idle(in)
		j.done <- struct{}{}
		if !stay {
			return
		}
		idle.Reset(workerIdle)
		select {
		case j = <-in:
			continue
		case <-idle.C:
		case <-ws.quit:
		}
		if ws.leave(in) {
			return
		}
		// A query took this worker off the ready stack before it could leave: serve it first.
		j = <-in
	}
}

// serve serves j and keeps a panic of serve, which run raises again in the caller.
func (j *job) serve(serve serveFunc) {
	defer func() { j.panic = recover() }()
	j.rc, j.err = serve(j.ctx, j.w, j.r, j.zone)
}

// idle puts the worker's channel on the ready stack and reports true, or false once the block
// stopped: the worker then exits.
func (ws *workers) idle(in chan *job) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.stopped {
		return false
	}
	ws.ready = append(ws.ready, in)
	return true
}

// leave takes the worker's channel off the ready stack and reports whether it was there; false
// means a query took the worker and its job is on the way.
func (ws *workers) leave(in chan *job) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for i, c := range ws.ready {
		if c == in {
			last := len(ws.ready) - 1
			copy(ws.ready[i:], ws.ready[i+1:])
			ws.ready[last] = nil
			ws.ready = ws.ready[:last]
			return true
		}
	}
	return false
}

// stop ends the idle workers; a busy one ends after its query. Queries after stop are served in
// the caller's goroutine.
func (ws *workers) stop() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if !ws.stopped {
		ws.stopped = true
		close(ws.quit)
	}
}

func newWorkers(serve serveFunc) *workers {
	return &workers{serve: serve, quit: make(chan struct{})}
}
