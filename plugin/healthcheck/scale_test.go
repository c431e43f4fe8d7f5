package healthcheck

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/health"
)

// The HC-5 scale check: 10,000 TCP targets at a 30 s interval against real listeners, measuring
// the CPU share of one core and the RSS of the probing process. It takes a while, so it runs
// only when asked:
//
//	HEALTHCHECK_SCALE=1 go test ./plugin/healthcheck/ -run TestScale10k -v
//
// HEALTHCHECK_SCALE_SECONDS sets the measuring window (default 30, one interval). The listeners
// (100 addresses 127.0.20.1-100 x 100 ports) live in a child process, so their accept loops are
// not counted against the prober.
func TestScale10k(t *testing.T) {
	if os.Getenv("HEALTHCHECK_SCALE") == "" {
		t.Skip("set HEALTHCHECK_SCALE=1 to run the 10,000-target scale check")
	}
	window := 30 * time.Second
	if s := os.Getenv("HEALTHCHECK_SCALE_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		window = time.Duration(n) * time.Second
	}
	const addrs, ports = 100, 100

	cmd := exec.Command(os.Args[0], "-test.run=^TestScaleListeners$")
	cmd.Env = append(os.Environ(), "HEALTHCHECK_LISTENERS="+strconv.Itoa(addrs)+"x"+strconv.Itoa(ports))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var targets []netip.AddrPort
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "READY" {
		if ap, err := netip.ParseAddrPort(sc.Text()); err == nil {
			targets = append(targets, ap)
		}
	}
	if len(targets) != addrs*ports {
		t.Fatalf("%d listeners, want %d", len(targets), addrs*ports)
	}

	rssBase := procStatus("VmRSS")
	b := health.NewBoard(time.Now)
	r := NewRegistry(b, realClock{})
	if os.Getenv("HEALTHCHECK_SCALE_NOPROBE") != "" { // the scheduler's own cost
		r.probe = func(context.Context, *checkRun, int, netip.AddrPort, string) attempt {
			return attempt{outcome: success}
		}
	}
	r.start()
	defer r.stop()
	c := newCheck("scale")
	c.Regions = []Region{{Name: defaultRegionName}}
	run := newCheckRun(c)
	bts := make([]*health.Target, len(targets))
	ps := make([]*probe, len(targets))
	u0, s0 := cpuSplit()
	cpu0, t0 := cpuTime(), time.Now()
	for i, tg := range targets {
		bts[i] = b.Acquire(health.Key{Check: "scale", Addr: tg.Addr(), Port: tg.Port()})
		b.Publish(bts[i])
		ps[i] = r.acquire(run, tg)
		r.attach(ps[i], bts[i])
	}
	if s := os.Getenv("HEALTHCHECK_SCALE_WARMUP"); s != "" {
		// Measure the steady state: after the first interval no target changes state.
		n, _ := strconv.Atoi(s)
		time.Sleep(time.Duration(n) * time.Second)
		u0, s0 = cpuSplit()
		cpu0, t0 = cpuTime(), time.Now()
	}
	rounds0 := r.rounds.Load()
	time.Sleep(window) // the measurement window itself, not a synchronisation
	cpu, wall := cpuTime()-cpu0, time.Since(t0)
	u1, s1 := cpuSplit()
	rounds := r.rounds.Load() - rounds0
	healthy, unknown := 0, 0
	for _, bt := range bts {
		switch bt.State() {
		case health.Healthy:
			healthy++
		case health.Unknown:
			unknown++
		}
	}
	share := 100 * cpu.Seconds() / wall.Seconds()
	t.Logf("%d TCP targets, interval %v, window %v: %d rounds (%.0f/s), CPU %.2fs (user %.2fs, system %.2fs) = %.2f%% of one core; "+
		"RSS %s (before the targets: %s), peak %s; healthy %d, unknown %d",
		len(targets), c.Interval, wall.Round(time.Millisecond), rounds, float64(rounds)/wall.Seconds(), cpu.Seconds(), (u1 - u0).Seconds(), (s1 - s0).Seconds(), share,
		procStatus("VmRSS"), rssBase, procStatus("VmHWM"), healthy, unknown)
	if share > 5 {
		t.Errorf("CPU %.2f%% of one core, goal under 5%%", share)
	}
	for i := range ps {
		r.detach(ps[i], bts[i])
		r.release(ps[i], run)
		b.Unpublish(bts[i])
		b.Release(bts[i])
	}
}

// TestScaleListeners is the child process of TestScale10k: it listens on ADDRSxPORTS sockets,
// prints them, and accepts and closes connections until killed.
func TestScaleListeners(t *testing.T) {
	spec := os.Getenv("HEALTHCHECK_LISTENERS")
	if spec == "" {
		t.Skip("child process of TestScale10k")
	}
	var na, np int
	if _, err := fmt.Sscanf(spec, "%dx%d", &na, &np); err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(os.Stdout)
	for a := 1; a <= na; a++ {
		for range np {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.20.%d:0", a))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(w, ln.Addr())
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
		}
	}
	fmt.Fprintln(w, "READY")
	w.Flush()
	select {} // killed by the parent
}

func cpuTime() time.Duration {
	u, s := cpuSplit()
	return u + s
}

// cpuSplit returns the user and system CPU time of the process.
func cpuSplit() (user, sys time.Duration) {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

func procStatus(field string) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(l, field+":") {
			return strings.Join(strings.Fields(l[len(field)+1:]), " ")
		}
	}
	return "?"
}

// BenchmarkTCPRound is the cost of one round of a one-prober TCP check against a local
// listener, through the scheduler's attempt path (probe, metrics, aggregation, thresholds).
//
//	go test ./plugin/healthcheck/ -run '^$' -bench TCPRound -benchtime=2000x
func BenchmarkTCPRound(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.3.9:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	defer func() { ln.Close(); <-done }()
	target := ln.Addr().(*net.TCPAddr).AddrPort()
	board := health.NewBoard(time.Now)
	r := NewRegistry(board, realClock{})
	c := newCheck("bench")
	c.Regions = []Region{{Name: defaultRegionName}}
	run := newCheckRun(c)
	r.ctx = context.Background()
	p := &probe{key: probeKey{"bench", target}, run: run, targets: map[*health.Target]int{}}
	p.ctx = context.Background()
	p.gauge = targetState.WithLabelValues("bench", target.String())
	defer targetState.DeleteLabelValues("bench", target.String())
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		rd := &round{p: p, run: run, res: make([]attempt, 1)}
		rd.left.Store(1)
		r.attempt(job{r: rd, slot: 0})
	}
}
