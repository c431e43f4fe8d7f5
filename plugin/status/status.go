// Package status implements the status plugin: an HTTP page and JSON showing what the coresteer
// plugins know, live (the health board with each prober region's view, load balancers,
// composites, record sets with their configured and served shares, the egress ranking), and
// explain, which says why a client gets the answer it gets. It serves on loopback by default,
// allows no writes and adds nothing to the query path (docs/DESIGN.md of the repository, section
// 9: S-1 to S-3).
package status

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/coredns/coredns/plugin/pkg/reuseport"
	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/statusview"
)

var log = clog.NewWithPlugin("status")

const shutdownTimeout = 5 * time.Second

// Status is the HTTP server of the status page.
type Status struct {
	addr  string
	views *statusview.Registry
	board *health.Board
	now   func() time.Time

	mu  sync.Mutex
	ln  net.Listener
	srv *http.Server
}

// New returns a Status serving on addr what the live providers of views show.
func New(addr string, views *statusview.Registry, board *health.Board) *Status {
	return &Status{addr: addr, views: views, board: board, now: time.Now}
}

// Addr returns the address the page is served on, once started.
func (s *Status) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

func (s *Status) start() error {
	ln, err := reuseport.Listen("tcp", s.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       30 * time.Second,
	}
	s.mu.Lock()
	s.ln, s.srv = ln, srv
	s.mu.Unlock()
	go func() {
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			log.Errorf("Status page on %s stopped: %v", s.addr, err)
		}
	}()
	return nil
}

func (s *Status) stop() error {
	s.mu.Lock()
	srv := s.srv
	s.srv, s.ln = nil, nil
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Infof("Status page on %s: %v", s.addr, err)
	}
	return nil
}

// Handler returns the pages: / and /status.json, /explain and /explain.json. Only GET and HEAD
// are allowed: nothing is written (S-3).
func (s *Status) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/{$}", s.page)
	mux.HandleFunc("/status.json", s.statusJSON)
	mux.HandleFunc("/explain", s.explainPage)
	mux.HandleFunc("/explain.json", s.explainJSON)
	return readOnly(mux)
}

// readOnly refuses every method but GET and HEAD and sets headers that keep the pages
// self-contained: no script, no external asset, no framing.
func readOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "status is read-only: only GET and HEAD are allowed", http.StatusMethodNotAllowed)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// view collects the live view.
func (s *Status) view() *statusview.View {
	v := &statusview.View{Generated: s.now()}
	s.views.Collect(v)
	derived := map[string]string{}
	for _, lb := range v.LoadBalancers {
		derived[lb.VIP] = "loadbalancer"
	}
	for _, c := range v.Composites {
		derived[c.Destination] = "composite"
	}
	for i := range v.Targets {
		if v.Targets[i].Check == "" {
			v.Targets[i].Derived = derived[v.Targets[i].Address]
		}
	}
	return v
}
