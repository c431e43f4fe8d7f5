package healthcheck

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/etcdtest"
	_ "github.com/coresteer/coresteer/plugin/routingpolicy" // the replicas answer with it
)

// replicaProc is a fleet replica in its own process: this test binary serving a Corefile with a
// real CoreDNS server (etcdtest.ServeReplica, from TestMain), so several replicas, each with its
// own process-wide probe registry and health board, run against one etcd as they do in
// production.
type replicaProc struct {
	*etcdtest.Replica
	logs *coretest.Log
}

// startReplicaProc starts a replica named name serving corefile with env, stopped when t ends,
// and waits until it serves.
func startReplicaProc(t *testing.T, name, corefile string, env ...string) *replicaProc {
	t.Helper()
	rp := &replicaProc{logs: &coretest.Log{}}
	// Replicas of these tests on 127.0.91.0/24, the status plugin's on 127.0.92.0/24.
	r, err := etcdtest.StartReplica(name, etcdtest.ReplicaAddr(91), corefile, []string{"-test.run=^$"}, env, rp.logs)
	if err != nil {
		t.Fatalf("%v\n%s", err, rp.logs)
	}
	rp.Replica = r
	t.Cleanup(r.Stop)
	return rp
}

// sourceTarget is an HTTP target that answers 200 to probes from some source addresses and 503
// to the others, and counts probes by source address.
type sourceTarget struct {
	addr netip.AddrPort
	mu   sync.Mutex
	ok   map[string]bool
	hits map[string]int
}

// sourceTargets starts HTTP targets on the given loopback addresses, all on one port (a check
// probes one port).
func sourceTargets(t *testing.T, ips ...string) []*sourceTarget {
	t.Helper()
	for range 50 {
		first, err := net.Listen("tcp", ips[0]+":0")
		if err != nil {
			t.Fatal(err)
		}
		port := first.Addr().(*net.TCPAddr).Port
		lns := []net.Listener{first}
		for _, ip := range ips[1:] {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				break
			}
			lns = append(lns, l)
		}
		if len(lns) < len(ips) {
			for _, l := range lns {
				l.Close()
			}
			continue
		}
		out := make([]*sourceTarget, 0, len(lns))
		for _, l := range lns {
			st := &sourceTarget{addr: netip.MustParseAddrPort(l.Addr().String()), ok: map[string]bool{}, hits: map[string]int{}}
			srv := &http.Server{Handler: st, ReadHeaderTimeout: time.Second}
			go func() { _ = srv.Serve(l) }()
			t.Cleanup(func() { srv.Close() })
			out = append(out, st)
		}
		return out
	}
	t.Fatal("no port free on every target address")
	return nil
}

func (st *sourceTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	src, _, _ := net.SplitHostPort(r.RemoteAddr)
	st.mu.Lock()
	st.hits[src]++
	ok := st.ok[src]
	st.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, "ok")
}

// allow makes the target healthy from these source addresses only.
func (st *sourceTarget) allow(srcs ...string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ok = map[string]bool{}
	for _, s := range srcs {
		st.ok[s] = true
	}
}

// take returns the probes by source address since the last take.
func (st *sourceTarget) take() map[string]int {
	st.mu.Lock()
	defer st.mu.Unlock()
	h := st.hits
	st.hits = map[string]int{}
	return h
}
