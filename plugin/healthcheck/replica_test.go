package healthcheck

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	_ "github.com/coresteer/coresteer/plugin/routingpolicy" // the replicas answer with it

	"github.com/miekg/dns"
)

// replicaEnv names the Corefile a replica process serves.
const replicaEnv = "HEALTHCHECK_TEST_REPLICA_COREFILE"

// replicaMain is a fleet replica: this test binary serving a Corefile with a real CoreDNS server,
// so several replicas, each with its own process-wide probe registry and health board, run
// against one etcd as they do in production. It reads commands on stdin, one per line:
// "reload FILE", "goroutines", "stop" (or end of input).
func replicaMain() int {
	cf, err := os.ReadFile(os.Getenv(replicaEnv))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	s, err := coretest.New(string(cf))
	if err != nil {
		fmt.Println("error", strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		switch cmd {
		case "reload":
			b, err := os.ReadFile(arg)
			if err == nil {
				err = s.Reload(string(b))
			}
			if err != nil {
				fmt.Println("error", strings.ReplaceAll(err.Error(), "\n", " "))
				continue
			}
			fmt.Println("reloaded")
		case "goroutines":
			// The probe workers are a pool that grows on demand: leave them out.
			fmt.Println(runtime.NumGoroutine() - int(defaultRegistry.workers.Load()))
		case "stop":
			s.Stop()
			return 0
		}
	}
	s.Stop()
	return 0
}

// replicaProc is a replica process seen from the test.
type replicaProc struct {
	name    string
	dns     string // UDP address
	metrics string // prometheus address
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan string
	logs    *coretest.Log
	done    chan struct{}
}

// startReplicaProc starts this test binary as a replica serving corefile with env, and waits
// until it serves.
func startReplicaProc(t *testing.T, name, corefile string, env ...string) *replicaProc {
	t.Helper()
	path := t.TempDir() + "/Corefile"
	if err := os.WriteFile(path, []byte(corefile), 0o600); err != nil {
		t.Fatal(err)
	}
	port, mport := coretest.FreePort(t), coretest.FreePort(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), replicaEnv+"="+path, "REPLICA="+name, "DNSPORT="+port, "METRICSPORT="+mport)
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	rp := &replicaProc{name: name, dns: "127.0.0.1:" + port, metrics: "127.0.0.1:" + mport, cmd: cmd, lines: make(chan string, 16), logs: &coretest.Log{}, done: make(chan struct{})}
	cmd.Stderr = rp.logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if rp.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			rp.lines <- sc.Text()
		}
		close(rp.lines)
	}()
	go func() { _ = cmd.Wait(); close(rp.done) }()
	t.Cleanup(rp.stop)
	if l := rp.reply(t); l != "ready" {
		t.Fatalf("replica %s: %s\n%s", name, l, rp.logs)
	}
	return rp
}

// reply returns the next line the replica prints.
func (rp *replicaProc) reply(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-rp.lines:
		if !ok {
			t.Fatalf("replica %s exited:\n%s", rp.name, rp.logs)
		}
		return l
	case <-time.After(60 * time.Second):
		t.Fatalf("replica %s does not answer:\n%s", rp.name, rp.logs)
	}
	return ""
}

// stop stops the replica cleanly (its shutdown revokes its lease).
func (rp *replicaProc) stop() {
	select {
	case <-rp.done:
		return
	default:
	}
	_ = rp.stdin.Close()
	select {
	case <-rp.done:
	case <-time.After(30 * time.Second):
		_ = rp.cmd.Process.Kill()
		<-rp.done
	}
}

// kill kills the replica as a crash would: nothing is given back, its lease expires.
func (rp *replicaProc) kill() {
	_ = rp.cmd.Process.Kill()
	<-rp.done
}

// answer returns the sorted A records of name from the replica.
func (rp *replicaProc) answer(name string) ([]string, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	c := &dns.Client{Timeout: 2 * time.Second}
	r, _, err := c.Exchange(m, rp.dns)
	if err != nil {
		return nil, err
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("rcode %s", dns.RcodeToString[r.Rcode])
	}
	var out []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	sort.Strings(out)
	return out, nil
}

// metric returns the value of the series of the replica's /metrics whose line starts with
// series (name{labels} exactly as exported), or -1 when there is none.
func (rp *replicaProc) metric(series string) float64 {
	resp, err := http.Get("http://" + rp.metrics + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range bytes.Lines(b) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(string(line)), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
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
