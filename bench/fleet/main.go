// Command fleet measures healthcheck's fleet mode (docs/DESIGN.md section 8) on one machine:
// 1, 3 and 10 replicas (real CoreDNS servers, each its own process, on 127.57.0.N) against one
// etcd (Debian's etcd-server, started by plugin/pkg/etcdtest) and 1,000 TCP targets on
// 127.56.x.y. For each replica count it reports the probe load on the targets and etcd's write
// rate, in steady state and while targets change state; for 1 and 3 replicas, the time from a
// target's failure until every replica answers without it. Only loopback addresses are used and
// every process it starts is stopped when it ends.
//
//	go run ./bench/fleet                      # about 4 minutes
//	go run ./bench/fleet -replicas 1,3 -window 5s -failover 1,3 -runs 3
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/etcdtest"
)

func main() {
	if os.Getenv(etcdtest.ReplicaEnv) != "" {
		os.Exit(etcdtest.ServeReplica())
	}
	var o options
	flag.StringVar(&o.replicas, "replicas", "1,3,10", "replica counts to measure the load with")
	flag.IntVar(&o.targets, "targets", 1000, "health-checked TCP targets (1..60000)")
	flag.DurationVar(&o.interval, "interval", 2*time.Second, "the check's interval")
	flag.IntVar(&o.perRegion, "per-region", 2, "replicas_per_region (one prober region)")
	flag.DurationVar(&o.window, "window", 10*time.Second, "measurement window")
	flag.IntVar(&o.changes, "changes", 100, "targets that fail, then recover, in the change windows")
	flag.StringVar(&o.failover, "failover", "1,3", "replica counts to time a target's failure with")
	flag.IntVar(&o.runs, "runs", 3, "failures timed per replica count")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

type options struct {
	replicas, failover string
	targets, perRegion int
	changes, runs      int
	interval, window   time.Duration
}

func counts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 50 {
			return nil, fmt.Errorf("replica count %q: want 1..50", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func run(o options) error {
	loads, err := counts(o.replicas)
	if err != nil {
		return err
	}
	fails, err := counts(o.failover)
	if err != nil {
		return err
	}
	if o.targets < 4 || o.targets > 60000 || o.changes < 1 || o.changes > o.targets-3 {
		return fmt.Errorf("-targets %d / -changes %d: want 4..60000 targets and 1..targets-3 changes", o.targets, o.changes)
	}
	b, err := newBench(o)
	if err != nil {
		return err
	}
	defer b.close()
	fmt.Printf("healthcheck fleet: %d TCP targets, interval %s, one prober region, replicas_per_region %d, window %s\n\n",
		o.targets, o.interval, o.perRegion, o.window)
	fmt.Println("| replicas | probes/s steady | expected | etcd writes/s steady | probes/s while changing | etcd writes/s while changing | results written per changed target |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, n := range loads {
		l, err := b.load(n)
		if err != nil {
			return err
		}
		expected := float64(o.targets*min(n, o.perRegion)) / o.interval.Seconds()
		fmt.Printf("| %d | %.0f | %.0f | %.2f | %.0f | %.2f | %.2f |\n", n, l.probes, expected, l.writes, l.probesChanging, l.writesChanging, l.perChange)
	}
	fmt.Println()
	fmt.Println("| replicas | a target's failure to every replica answering without it (min / median / max) |")
	fmt.Println("|---|---|")
	for _, n := range fails {
		ds, err := b.failoverTimes(n)
		if err != nil {
			return err
		}
		slices.Sort(ds)
		fmt.Printf("| %d | %.2f s / %.2f s / %.2f s |\n", n, ds[0].Seconds(), ds[len(ds)/2].Seconds(), ds[len(ds)-1].Seconds())
	}
	return nil
}
