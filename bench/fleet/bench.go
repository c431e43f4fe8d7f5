package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/etcdtest"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// bench is one etcd and the targets, shared by every measurement; each measurement starts its
// replicas with a prefix of its own.
type bench struct {
	o    options
	dir  string
	etcd *etcdtest.Server
	cli  *clientv3.Client
	sink *sink
	runs int
}

func newBench(o options) (*bench, error) {
	dir, err := os.MkdirTemp("", "fleet-bench-")
	if err != nil {
		return nil, err
	}
	b := &bench{o: o, dir: dir}
	if b.etcd, err = etcdtest.Launch(filepath.Join(dir, "etcd")); err != nil {
		b.close()
		return nil, err
	}
	if b.cli, err = clientv3.New(clientv3.Config{Endpoints: []string{b.etcd.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}); err != nil {
		b.close()
		return nil, err
	}
	if b.sink, err = newSink(o.targets); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func (b *bench) close() {
	if b.sink != nil {
		b.sink.close()
	}
	if b.cli != nil {
		b.cli.Close()
	}
	if b.etcd != nil {
		b.etcd.Stop()
	}
	os.RemoveAll(b.dir)
}

// corefile is every replica's Corefile: a load balancer wants every target probed, the record
// set www serves the first three.
func (b *bench) corefile(prefix string) string {
	backends := make([]string, 0, len(b.sink.addrs))
	for _, a := range b.sink.addrs {
		backends = append(backends, a.String())
	}
	return fmt.Sprintf(`fleet.bench:{$DNSPORT} {
	bind {$ADDR}
	prometheus {$ADDR}:{$METRICSPORT}
	healthcheck {
		check tcp {
			port %d
			interval %s
			timeout %s
			prober us-east1
		}
		loadbalancer 10.255.0.1 {
			backends %s
			check tcp
		}
		fleet etcd %s {
			prefix %s
			replica {$REPLICA}
			replicas_per_region %d
		}
		ready_wait off
	}
	routingpolicy {
		wrr www A 30 "1=%s" healthcheck tcp
	}
}
`, b.sink.port, b.o.interval, b.o.interval/2, strings.Join(backends, " "), b.etcd.Endpoint, prefix, b.o.perRegion, strings.Join(backends[:3], ","))
}

// start starts n replicas of a new fleet and waits until the fleet decides and the probing is
// sharded: every replica joined, out of fallback, and the targets probed add up to
// targets x min(n, replicas_per_region).
func (b *bench) start(n int) (*fleetRun, error) {
	b.runs++
	prefix := fmt.Sprintf("/bench/%d", b.runs)
	dir := filepath.Join(b.dir, "run"+strconv.Itoa(b.runs))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	f := &fleetRun{}
	for i := range n {
		r, err := startReplica(dir, b.corefile(prefix), fmt.Sprintf("r%d", i+1), fmt.Sprintf("127.57.0.%d", i+1))
		if err != nil {
			f.stop()
			return nil, err
		}
		f.replicas = append(f.replicas, r)
	}
	want := float64(b.o.targets * min(n, b.o.perRegion))
	deadline := time.Now().Add(60*time.Second + 5*b.o.interval)
	for {
		sum, fallback := 0.0, 0.0
		for _, r := range f.replicas {
			sum += metric(r, "coredns_healthcheck_fleet_targets_probed")
			fallback += metric(r, "coredns_healthcheck_fleet_fallback")
		}
		if sum == want && fallback == 0 {
			break
		}
		if time.Now().After(deadline) {
			f.stop()
			return nil, fmt.Errorf("%d replicas: %v targets probed, want %v; %v in fallback", n, sum, want, fallback)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// One more interval: every replica past its warm-up.
	time.Sleep(b.o.interval)
	return f, nil
}

// revision is etcd's current revision: it grows by one per write transaction.
func (b *bench) revision() (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := b.cli.Get(ctx, "/bench-revision")
	if err != nil {
		return 0, err
	}
	return r.Header.GetRevision(), nil
}

type loadResult struct {
	probes, writes, probesChanging, writesChanging, perChange float64
}

// measure returns probes/s, etcd writes/s and results written during one window.
func (b *bench) measure(f *fleetRun, during func()) (probes, writes, results float64, err error) {
	a0, p0 := b.sink.accepted.Load(), f.published()
	r0, err := b.revision()
	if err != nil {
		return 0, 0, 0, err
	}
	start := time.Now()
	if during != nil {
		during()
	}
	time.Sleep(b.o.window)
	el := time.Since(start).Seconds()
	r1, err := b.revision()
	if err != nil {
		return 0, 0, 0, err
	}
	return float64(b.sink.accepted.Load()-a0) / el, float64(r1-r0) / el, f.published() - p0, nil
}

// load measures n replicas: a steady window, then a window in which o.changes targets fail and
// one in which they recover.
func (b *bench) load(n int) (loadResult, error) {
	f, err := b.start(n)
	if err != nil {
		return loadResult{}, err
	}
	defer f.stop()
	var l loadResult
	if l.probes, l.writes, _, err = b.measure(f, nil); err != nil {
		return l, err
	}
	failing := make([]int, b.o.changes)
	for i := range failing {
		failing[i] = 3 + i*(b.o.targets-3)/b.o.changes // never the record set's three
	}
	p1, w1, res1, err := b.measure(f, func() {
		for _, i := range failing {
			b.sink.fail(i)
		}
	})
	if err != nil {
		return l, err
	}
	p2, w2, res2, err := b.measure(f, func() {
		for _, i := range failing {
			if err := b.sink.recover(i); err != nil {
				fmt.Fprintln(os.Stderr, "fleet: recover:", err)
			}
		}
	})
	if err != nil {
		return l, err
	}
	l.probesChanging, l.writesChanging = (p1+p2)/2, (w1+w2)/2
	l.perChange = (res1 + res2) / float64(2*b.o.changes)
	return l, nil
}

// failoverTimes times o.runs failures of target 0 with n replicas: from the listener's close
// until no replica answers www with it.
func (b *bench) failoverTimes(n int) ([]time.Duration, error) {
	f, err := b.start(n)
	if err != nil {
		return nil, err
	}
	defer f.stop()
	target := b.sink.addrs[0].String()
	var out []time.Duration
	for range b.o.runs {
		t0 := time.Now()
		b.sink.fail(0)
		if err := f.until(target, false, 60*time.Second); err != nil {
			return nil, err
		}
		out = append(out, time.Since(t0))
		if err := b.sink.recover(0); err != nil {
			return nil, err
		}
		if err := f.until(target, true, 60*time.Second); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// fleetRun is the replicas of one measurement.
type fleetRun struct{ replicas []*etcdtest.Replica }

func (f *fleetRun) stop() {
	for _, r := range f.replicas {
		r.Stop()
	}
}

func (f *fleetRun) published() float64 {
	sum := 0.0
	for _, r := range f.replicas {
		sum += metric(r, "coredns_healthcheck_fleet_results_published_total")
	}
	return sum
}

// until polls every replica until each answers www with target (in true) or without it.
func (f *fleetRun) until(target string, in bool, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		all := true
		for _, r := range f.replicas {
			got, err := r.Answer("www.fleet.bench")
			if err != nil || slices.Contains(got, target) != in {
				all = false
				break
			}
		}
		if all {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("replicas did not agree on " + target + " in time")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
