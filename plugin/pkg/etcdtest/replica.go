package etcdtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coresteer/coresteer/plugin/pkg/chain"
	"github.com/coresteer/coresteer/plugin/pkg/freeport"

	"github.com/miekg/dns"
)

// ReplicaEnv names the Corefile a replica process serves. A program that finds it set in its
// environment is a replica: its main calls ServeReplica and exits with what it returns.
const ReplicaEnv = "ETCDTEST_REPLICA_COREFILE"

// Replica is a fleet replica in a process of its own: the calling program started again with
// ReplicaEnv set, serving a Corefile with a real CoreDNS server, so that each replica has its own
// process-wide probe registry, health board and fleet membership, as in production. The Corefile
// reads its place from the environment: {$REPLICA}, {$ADDR}, {$DNSPORT} and {$METRICSPORT}, and
// whatever the caller adds.
type Replica struct {
	// Name is the replica's name ({$REPLICA}); DNS and Metrics its DNS and prometheus addresses.
	Name, DNS, Metrics string

	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
}

// replicaAddrs counts the addresses ReplicaAddr gave out.
var replicaAddrs atomic.Uint32

// ReplicaAddr returns a loopback address of 127.0.BLOCK.0/24 for one replica process, another at
// each call (250 in turn). A replica on an address of its own keeps the ports StartReplica picks
// free for it: on 127.0.0.1 a connection another process opens meanwhile (etcd clients, other test
// packages) can take one before the replica binds it. Give each package its own BLOCK.
func ReplicaAddr(block byte) string {
	return fmt.Sprintf("127.0.%d.%d", block, replicaAddrs.Add(1)%250+1)
}

// StartReplica starts a replica named name on addr (a loopback address), serving corefile, with
// env added to its environment and args to its command line (a test binary needs
// -test.run=^$), its standard error written to logs; it returns once the replica serves.
func StartReplica(name, addr, corefile string, args, env []string, logs io.Writer) (*Replica, error) {
	f, err := os.CreateTemp("", "replica-*.Corefile")
	if err != nil {
		return nil, err
	}
	path := f.Name()
	defer os.Remove(path) // read once, at startup
	_, err = f.WriteString(corefile)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	port, err := freeport.On(addr)
	if err != nil {
		return nil, err
	}
	mport, err := freeport.On(addr)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), ReplicaEnv+"="+path, "REPLICA="+name, "ADDR="+addr, "DNSPORT="+port, "METRICSPORT="+mport)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r := &Replica{Name: name, DNS: net.JoinHostPort(addr, port), Metrics: net.JoinHostPort(addr, mport), cmd: cmd, lines: make(chan string, 16), done: make(chan struct{})}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if r.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
	}()
	go func() { _ = cmd.Wait(); close(r.done) }()
	if l, err := r.reply(); err != nil || l != "ready" {
		r.Kill()
		if err == nil {
			err = errors.New(l)
		}
		return nil, fmt.Errorf("replica %s: %w", name, err)
	}
	return r, nil
}

// reply returns the next line the replica prints, waiting up to a minute.
func (r *Replica) reply() (string, error) {
	select {
	case l, ok := <-r.lines:
		if !ok {
			return "", errors.New("exited")
		}
		return l, nil
	case <-time.After(time.Minute):
		return "", errors.New("no answer within a minute")
	}
}

// Stop stops the replica cleanly (its shutdown revokes its lease), killing it after 30 s.
func (r *Replica) Stop() {
	select {
	case <-r.done:
		return
	default:
	}
	_ = r.stdin.Close()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		r.Kill()
	}
}

// Kill kills the replica as a crash would: nothing is given back, its lease expires.
func (r *Replica) Kill() {
	_ = r.cmd.Process.Kill()
	<-r.done
}

// Answer returns the sorted A records of name from the replica.
func (r *Replica) Answer(name string) ([]string, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	c := &dns.Client{Timeout: 2 * time.Second}
	resp, _, err := c.Exchange(m, r.DNS)
	if err != nil {
		return nil, err
	}
	if resp.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("rcode %s", dns.RcodeToString[resp.Rcode])
	}
	var out []string
	for _, rr := range resp.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	slices.Sort(out)
	return out, nil
}

// Metric returns the sum of the replica's series that series names: a metric name (every series
// of it) or name{labels} exactly as exported (that series); -1 when there is none or /metrics
// does not answer.
func (r *Replica) Metric(series string) float64 {
	resp, err := http.Get("http://" + r.Metrics + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	sum, found := 0.0, false
	for line := range bytes.Lines(b) {
		l := strings.TrimSpace(string(line))
		if !strings.HasPrefix(l, series+" ") && (strings.Contains(series, "{") || !strings.HasPrefix(l, series+"{")) {
			continue
		}
		f := strings.Fields(l)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum, found = sum+v, true
		}
	}
	if !found {
		return -1
	}
	return sum
}

type corefile string

func (c corefile) Body() []byte       { return []byte(c) }
func (c corefile) Path() string       { return "Corefile" }
func (c corefile) ServerType() string { return "dns" }

// ServeReplica is a replica process's main: it serves the Corefile named by ReplicaEnv with the
// plugins the program imports, in coresteer's chain order, prints "ready", and stops, running
// every shutdown callback, when its standard input says "stop" or ends.
func ServeReplica() int {
	b, err := os.ReadFile(os.Getenv(ReplicaEnv)) //nolint:gosec // the Corefile the parent wrote for this process
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	chain.Install()
	caddy.Quiet = true
	dnsserver.Quiet = true
	inst, err := caddy.Start(corefile(b))
	if err != nil {
		if inst != nil {
			inst.ShutdownCallbacks()
		}
		fmt.Println("error", strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() && sc.Text() != "stop" {
	}
	_ = inst.Stop()
	inst.ShutdownCallbacks()
	return 0
}
