package healthcheck

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/etcdtest"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// fleetLB is a Corefile whose load balancer wants its backends probed by check tcp1, in a fleet.
func fleetLB(endpoint, prefix, timeout string, backends ...netip.AddrPort) string {
	bs := make([]string, 0, len(backends))
	for _, b := range backends {
		bs = append(bs, b.String())
	}
	return fmt.Sprintf(`example.org:0 {
	bind 127.0.0.1
	healthcheck {
		check tcp1 {
			interval 1s
			timeout 500ms
			prober us-east1
		}
		loadbalancer 10.99.9.1 {
			backends %s
			check tcp1
		}
		fleet etcd %s {
			prefix %s
			replica r1
			timeout %s
		}
	}
	whoami
}
`, strings.Join(bs, " "), endpoint, prefix, timeout)
}

// member returns the member key of replica under prefix, or nil.
func member(t *testing.T, cli *clientv3.Client, prefix, replica string) *clientv3.GetResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, memberKey(prefix, replica))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func leases(t *testing.T, cli *clientv3.Client) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return len(r.Leases)
}

func results(t *testing.T, cli *clientv3.Client, prefix string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, prefix+resultsDir, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return int(r.Count)
}

// F-1 and the fleet's lifecycle through real Corefile reloads: a reload keeps the membership
// (same member key, same lease, no second registration) and the watch; goroutines do not grow;
// a reload that adds a target publishes it under the same lease; shutdown revokes the lease, so
// the member and its results leave at once.
func TestFleetReloadKeepsMembershipF1(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	cli := etcd.Client(t)
	b1, b2 := listen(t, "127.0.83.1:0"), listen(t, "127.0.83.2:0")
	const prefix = "/test/reload"
	s := coretest.Start(t, fleetLB(etcd.Endpoint, prefix, "3s", b1.addr()))
	waitFor(t, "the replica's result of its target", func() bool { return results(t, cli, prefix) == 1 })
	m0 := member(t, cli, prefix, "r1")
	if len(m0.Kvs) != 1 || leases(t, cli) != 1 {
		t.Fatalf("member %v, %d leases: want one member under one lease", m0.Kvs, leases(t, cli))
	}
	g0 := goroutines()
	for i := range 3 {
		if err := s.Reload(fleetLB(etcd.Endpoint, prefix, "3s", b1.addr())); err != nil {
			t.Fatal(err)
		}
		m := member(t, cli, prefix, "r1")
		if len(m.Kvs) != 1 || m.Kvs[0].GetLease() != m0.Kvs[0].GetLease() || m.Kvs[0].GetCreateRevision() != m0.Kvs[0].GetCreateRevision() || m.Kvs[0].GetModRevision() != m0.Kvs[0].GetModRevision() {
			t.Fatalf("reload %d: member %v, want it unchanged (%v)", i, m.Kvs, m0.Kvs)
		}
		if n := leases(t, cli); n != 1 {
			t.Fatalf("reload %d: %d leases, want 1", i, n)
		}
		waitFor(t, "goroutines back to their number before the reloads", func() bool { return goroutines() <= g0 })
	}
	// A reload with a second backend: its result is published under the same lease.
	if err := s.Reload(fleetLB(etcd.Endpoint, prefix, "3s", b1.addr(), b2.addr())); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new target's result", func() bool { return results(t, cli, prefix) == 2 })
	if m := member(t, cli, prefix, "r1"); m.Kvs[0].GetLease() != m0.Kvs[0].GetLease() || leases(t, cli) != 1 {
		t.Fatalf("after adding a target: member %v, %d leases", m.Kvs, leases(t, cli))
	}
	// Back to one backend: the dropped target's result is withdrawn at once.
	if err := s.Reload(fleetLB(etcd.Endpoint, prefix, "3s", b1.addr())); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dropped target's result withdrawn", func() bool { return results(t, cli, prefix) == 1 })
	if n := len(coretest.Series(t, "coredns_healthcheck_fleet_members")); n != 1 {
		t.Fatalf("%d fleet_members series, want 1", n)
	}
	s.Stop()
	if m := member(t, cli, prefix, "r1"); len(m.Kvs) != 0 || leases(t, cli) != 0 || results(t, cli, prefix) != 0 {
		t.Fatalf("after shutdown: member %v, %d leases, %d results: want none (the lease is revoked)", m.Kvs, leases(t, cli), results(t, cli, prefix))
	}
	if n := len(coretest.Series(t, "coredns_healthcheck_fleet_members")); n != 0 {
		t.Fatalf("%d fleet_members series after shutdown, want 0 (H-6)", n)
	}
}

// F-4: an etcd that cannot be reached at startup, or an endpoint that accepts connections but
// is not etcd (a listener that closes every connection), does not delay startup; the replica
// starts alone, answers, says why, and probes and decides its targets itself.
func TestFleetStartupUnreachableF4(t *testing.T) {
	for _, tc := range []struct {
		name, target string
		endpoint     func(t *testing.T) string
	}{
		{"unreachable", "127.0.83.3:0", func(t *testing.T) string { t.Helper(); return "http://127.0.0.1:" + coretest.FreePort(t) }},
		{"notetcd", "127.0.83.6:0", func(t *testing.T) string { t.Helper(); return "http://" + listen(t, "127.0.83.7:0").addr().String() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakCheck(t)
			logs := coretest.CaptureLog(t)
			b := listen(t, tc.target)
			start := time.Now()
			s := coretest.Start(t, fleetLB(tc.endpoint(t), "/test/"+tc.name, "2s", b.addr()))
			if d := time.Since(start); d >= 2*time.Second {
				t.Errorf("startup took %s: it waited for the endpoint (timeout 2s)", d)
			}
			if r, err := s.Query("example.org", 1); err != nil || r.Rcode != 0 {
				t.Fatalf("query: %v %v", r, err)
			}
			k := health.Key{Check: "tcp1", Addr: b.addr().Addr(), Port: b.addr().Port()}
			waitFor(t, "the target decided alone", func() bool { st, _ := coretest.OnBoard(health.Default, k); return st.State == health.Healthy })
			waitFor(t, "the log line saying why", func() bool {
				return logs.Count("Fleet /test/"+tc.name+" (replica r1): not joined yet, probing and deciding alone") == 1
			})
			if v := gaugeValue(t, "coredns_healthcheck_fleet_fallback", "r1"); v != 1 {
				t.Errorf("fallback gauge %v, want 1", v)
			}
			s.Stop()
		})
	}
}

// F-4: a replica deciding alone is ready like one without a fleet: `ready` answers 200 once its
// target has its own verdict, while the fallback gauge says it decides alone.
func TestFleetFallbackReadyF4(t *testing.T) {
	leakCheck(t)
	b := listen(t, "127.0.83.4:0")
	nobody := "http://127.0.0.1:" + coretest.FreePort(t)
	readyAddr := "127.0.0.1:" + coretest.FreePort(t)
	corefile := strings.Replace(fleetLB(nobody, "/test/fallbackready", "2s", b.addr()),
		"\tbind 127.0.0.1\n", "\tbind 127.0.0.1\n\tready "+readyAddr+"\n", 1)
	s := coretest.Start(t, corefile)
	client := &http.Client{Timeout: time.Second}
	waitFor(t, "/ready 200 while deciding alone", func() bool {
		resp, err := client.Get("http://" + readyAddr + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if v := gaugeValue(t, "coredns_healthcheck_fleet_fallback", "r1"); v != 1 {
		t.Errorf("fallback gauge %v while ready, want 1 (deciding alone)", v)
	}
	s.Stop()
}

// F-3: results are published when they change, not every round: with the target's state steady,
// rounds of probes write nothing to etcd (its revision stays); when the target fails, the new
// state is written.
func TestFleetPublishesOnChangeF3(t *testing.T) {
	leakCheck(t)
	r1 := startFleetReplica(t, "127.0.83.5:0", "/test/onchange")
	cli, s, b, prefix := r1.cli, r1.s, r1.target, r1.prefix
	rev := func() int64 {
		t.Helper()
		r := member(t, cli, prefix, "r1")
		return r.Header.GetRevision()
	}
	r0 := rev()
	seen := func() int { b.mu.Lock(); defer b.mu.Unlock(); return b.total }
	p0 := seen()
	waitFor30(t, "three more probe rounds of the target", func() bool { return seen() >= p0+3 })
	if r1 := rev(); r1 != r0 {
		t.Errorf("etcd's revision went from %d to %d over three rounds of an unchanged target: results rewritten every round", r0, r1)
	}
	b.close()
	waitFor30(t, "the target's failure published", func() bool { return rev() > r0 })
	s.Stop()
}

// gaugeValue reads the gauge name of replica from the process's registry, -1 when absent.
func gaugeValue(t *testing.T, name, replica string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "replica" && l.GetValue() == replica {
					if g := m.GetGauge(); g != nil {
						return g.GetValue()
					}
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

// A replica name taken by another live process is detected and logged: a second process of
// this test binary serves a Corefile with the name this process holds; it stays alone (its
// fallback metric says so) until the name is free, then joins by itself. This process's own
// membership is not disturbed.
func TestFleetDuplicateReplica(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	const prefix = "/test/dup"
	v := newFleetView([]*Check{fleetCheck(time.Second, "us-east1")})
	f := joinFleet(testFleetConfig(etcd.Endpoint, prefix, "same", 1), v)
	left := false
	defer func() {
		if !left {
			f.leave(v)
		}
	}()
	waitFor(t, "this process joined", func() bool { j, _ := joinedMode(f); return j })
	other := startReplicaProc(t, "same", fleetCorefile(etcd.Endpoint, prefix, 9, "127.0.0.1", 1, 1, time.Second), "REGION=us-east1", "SOURCE=127.0.0.1")
	waitFor30(t, "the other process logs the duplicate", func() bool {
		return strings.Count(other.logs.String(), `replica name "same" is already registered by another live process`) == 1
	})
	if m := other.Metric(`coredns_healthcheck_fleet_fallback{replica="same"}`); m != 1 {
		t.Errorf("the other process's fallback metric %v, want 1 (alone)", m)
	}
	if j, _ := joinedMode(f); !j {
		t.Fatal("this process lost its membership to the duplicate")
	}
	f.leave(v)
	left = true
	waitFor30(t, "the other process joins once the name is free", func() bool {
		return strings.Contains(other.logs.String(), "(replica same): joined (lease")
	})
	if n := strings.Count(other.logs.String(), `replica name "same" is already registered`); n != 1 {
		t.Errorf("the duplicate was logged %d times, want once:\n%s", n, other.logs)
	}
}

func joinedMode(f *fleet) (joined, shared bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.mode(time.Second)
}

// F-1, F-4: a lost lease (revoked here, as etcd does when renewals stop reaching it) ends the
// session; the replica joins again by itself with a new lease and registers again.
func TestFleetLeaseLostRejoinsF4(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	cli := etcd.Client(t)
	const prefix = "/test/lost"
	c := fleetCheck(time.Second, "us-east1")
	v := newFleetView([]*Check{c})
	f := joinFleet(testFleetConfig(etcd.Endpoint, prefix, "r1", 1), v)
	defer f.leave(v)
	waitFor(t, "joined", func() bool { return len(member(t, cli, prefix, "r1").Kvs) == 1 })
	lease := member(t, cli, prefix, "r1").Kvs[0].GetLease()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(lease)); err != nil {
		t.Fatal(err)
	}
	waitFor30(t, "registered again under a new lease", func() bool {
		m := member(t, cli, prefix, "r1")
		return len(m.Kvs) == 1 && m.Kvs[0].GetLease() != lease
	})
}

// A watch whose revision etcd compacted away is listed again and restarted from the list's
// revision: the mirror has what was written before and after.
func TestFleetWatchCompactedRelists(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	cli := etcd.Client(t)
	const prefix = "/test/compact"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	put := func(key, val string) int64 {
		t.Helper()
		r, err := cli.Put(ctx, key, val)
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.GetRevision()
	}
	put(memberKey(prefix, "other"), `{"nonce":"x","checks":{"web":["us-east1"]}}`)
	rev := put(prefix+resultsDir+"web/10.0.0.1:80/us-east1/other", `{"nonce":"x","healthy":1,"decided":1}`)
	if _, err := cli.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	f := newFleet(testFleetConfig(etcd.Endpoint, prefix, "r1", 1))
	defer fleetSeries.Release("r1")
	f.cli = etcd.Client(t)
	g, err := cli.Grant(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	fctx, stop := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- f.follow(fctx, g.ID, 1) }() // from revision 2, compacted away
	has := func(member string, pair pairKey) func() bool {
		return func() bool {
			f.mu.RLock()
			defer f.mu.RUnlock()
			_, ok := f.mirror.members[member]
			return ok && len(f.mirror.results[pair]) == 1
		}
	}
	waitFor(t, "the mirror listed again", has("other", pairKey{check: "web", target: "10.0.0.1:80"}))
	put(memberKey(prefix, "third"), `{"nonce":"y","checks":{"web":["us-east1"]}}`)
	put(prefix+resultsDir+"web/10.0.0.2:80/us-east1/third", `{"nonce":"y","healthy":0,"decided":1,"failure":"timeout"}`)
	waitFor(t, "the watch restarted after the list", has("third", pairKey{check: "web", target: "10.0.0.2:80"}))
	stop()
	if err := <-errc; err == nil {
		t.Fatal("follow ended without an error")
	}
}

// F-4 and bad input: a replica that cannot reach etcd at startup logs why: the endpoint and what
// connecting to it says.
func TestFleetUnreachableLogNamesEndpointF4(t *testing.T) {
	leakCheck(t)
	logs := coretest.CaptureLog(t)
	b := listen(t, "127.0.86.10:0")
	nobody := "127.0.0.1:" + coretest.FreePort(t)
	s := coretest.Start(t, fleetLB("http://"+nobody, "/test/why", "1s", b.addr()))
	defer s.Stop()
	waitFor30(t, "the fallback log line", func() bool { return logs.Count("not joined yet") == 1 })
	if l := logs.Lines("not joined yet")[0]; !strings.Contains(l, "http://"+nobody+": dial tcp "+nobody) || !strings.Contains(l, "connection refused") {
		t.Fatalf("the log line does not say why: %s", l)
	}
}

// F-1: a replica that stops (or a reload that ends its membership) while it is joining revokes
// its new lease: its member key does not stay until the lease expires. The prefix is made large
// so that the join's list takes a while.
func TestFleetStopWhileJoiningRevokesF1(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	cli := etcd.Client(t)
	const prefix = "/test/stopjoining"
	bigPrefix(t, cli, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wch := cli.Watch(ctx, memberKey(prefix, "r1"))
	v := newFleetView([]*Check{fleetCheck(time.Second, "us-east1")})
	f := joinFleet(testFleetConfig(etcd.Endpoint, prefix, "r1", 1), v)
	<-wch // registered: the session now lists the prefix
	f.leave(v)
	if m := member(t, cli, prefix, "r1"); len(m.Kvs) != 0 {
		t.Fatalf("the replica stopped but its member key stays (lease %x, %d leases): it leaves only when the lease expires", m.Kvs[0].GetLease(), leases(t, cli))
	}
}

// bigPrefix fills prefix with 20,000 keys of 512 bytes that are neither members nor results,
// so that listing the prefix takes a while.
func bigPrefix(t *testing.T, cli *clientv3.Client, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	val := strings.Repeat("x", 512)
	for i := 0; i < 20000; i += fleetMaxOps {
		ops := make([]clientv3.Op, 0, fleetMaxOps)
		for j := i; j < i+fleetMaxOps; j++ {
			ops = append(ops, clientv3.OpPut(prefix+"/other/"+strconv.Itoa(j), val))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// F-1: a reload that changes only the fleet's timeout (or adds an endpoint of the same cluster,
// or rotates the credentials) makes a new membership of the same replica in the same process: it
// takes the old one's member key over, it is not a duplicate replica name held "by another live
// process", even when the reload comes while the old membership is joining.
func TestFleetReloadNewTimeoutNotDuplicateF1(t *testing.T) {
	leakCheck(t)
	logs := coretest.CaptureLog(t)
	etcd := etcdtest.New(t)
	cli := etcd.Client(t)
	b := listen(t, "127.0.86.3:0")
	const prefix = "/test/retimeout"
	bigPrefix(t, cli, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wch := cli.Watch(ctx, memberKey(prefix, "r1"))
	s := coretest.Start(t, fleetLB(etcd.Endpoint, prefix, "3s", b.addr()))
	<-wch // registered, still joining
	if err := s.Reload(fleetLB(etcd.Endpoint, prefix, "2s", b.addr())); err != nil {
		t.Fatal(err)
	}
	waitFor30(t, "the new membership joined", func() bool { return logs.Count("(replica r1): joined (lease") >= 1 })
	waitFor30(t, "one member key under the new membership's lease", func() bool {
		m := member(t, cli, prefix, "r1")
		return len(m.Kvs) == 1 && leases(t, cli) == 1
	})
	if n := logs.Count("is already registered by another live process"); n != 0 {
		t.Fatalf("a reload of the same replica was logged as a duplicate replica name:\n%s", strings.Join(logs.Lines("Fleet"), "\n"))
	}
	s.Stop()
	if m := member(t, cli, prefix, "r1"); len(m.Kvs) != 0 || leases(t, cli) != 0 {
		t.Fatalf("after shutdown: member %v, %d leases", m.Kvs, leases(t, cli))
	}
}

// F-4: a shutdown (and so a reload that changes the fleet's endpoints, and SIGTERM) does not hang
// on an etcd that does not answer (paused: a hung host, its connections open): the revocation of
// the lease waits at most half a second, not the fleet's timeout (here 10 s).
func TestFleetStopUnansweringEtcdF4(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	cli := etcd.Client(t)
	b := listen(t, "127.0.86.4:0")
	const prefix = "/test/shutdownstop"
	s := coretest.Start(t, fleetLB(etcd.Endpoint, prefix, "10s", b.addr()))
	waitFor(t, "joined", func() bool { return len(member(t, cli, prefix, "r1").Kvs) == 1 })
	etcd.Pause()
	defer etcd.Resume()
	start := time.Now()
	s.Stop()
	if d := time.Since(start); d > fleetRevokeWait+time.Second {
		t.Fatalf("shutdown took %.1fs with etcd not answering (fleet timeout 10s)", d.Seconds())
	}
}

// F-1, F-3: credentials USER PASSWORD against an etcd with authentication on, the user allowed
// to read and write the fleet's prefix only (as the README asks): the replica joins, publishes,
// and leaves.
func TestFleetCredentialsF1(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	cli := etcd.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const prefix = "/test/auth"
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "dns"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "dns", prefix+"/", clientv3.GetPrefixRangeEnd(prefix+"/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, "coresteer", "s3cret"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "coresteer", "dns"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, s := range steps {
		if err := s(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	root, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, Username: "root", Password: "rootpw", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	tg := netip.MustParseAddrPort("127.0.86.7:80")
	script := newRegionScript()
	script.set(tg, "us-east1")
	cfg := testFleetConfig(etcd.Endpoint, prefix, "r1", 1)
	cfg.Username, cfg.Password = "coresteer", "s3cret"
	r := startReplica(t, cfg, fleetCheck(time.Second, "us-east1"), script, tg)
	waitFor30(t, "decided from the fleet with credentials", func() bool {
		return r.status(0).Reason == "fleet: 1/1 regions healthy"
	})
	count := func() int64 {
		resp, err := root.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	if n := count(); n != 2 {
		t.Errorf("%d keys under the prefix, want the member and its result", n)
	}
	r.stop()
	if n := count(); n != 0 {
		t.Fatalf("%d keys left behind after leaving", n)
	}
}

// gate is a directive for reloads whose end a test chooses: its OnStartup, which runs after
// healthcheck's (it is the last directive), waits for the result the test sends on gateResult.
// An error stands for a later plugin that fails to start, so caddy abandons the new instance
// (lifecycle runs its shutdown) and the old one keeps serving.
var gateResult = make(chan error)

func init() {
	plugin.Register("gate", func(c *caddy.Controller) error {
		c.OnStartup(func() error { return <-gateResult })
		return nil
	})
	dnsserver.Directives = append(dnsserver.Directives, "gate")
}

// gated adds the gate directive to the first server block of corefile.
func gated(corefile string) string {
	return strings.Replace(corefile, "\twhoami\n", "\twhoami\n\tgate\n", 1)
}

// leaseWatch records the events under prefix (the fleet's keys and an end marker beside them).
type leaseWatch struct {
	t      *testing.T
	cli    *clientv3.Client
	prefix string
	ch     clientv3.WatchChan
}

func watchLeases(t *testing.T, cli *clientv3.Client, prefix string, rev int64) *leaseWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &leaseWatch{t: t, cli: cli, prefix: prefix, ch: cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))}
}

// until reads events until cond says stop, failing after 30 s.
func (w *leaseWatch) until(what string, cond func(*clientv3.Event) bool) {
	w.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case wr := <-w.ch:
			if slices.ContainsFunc(wr.Events, cond) {
				return
			}
		case <-timeout:
			w.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// deletions writes an end marker beside the fleet's keys and returns the fleet's keys deleted
// up to it: a member key or a result that went away, however briefly.
func (w *leaseWatch) deletions() []string {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	end := w.prefix + "-end"
	if _, err := w.cli.Put(ctx, end, "x"); err != nil {
		w.t.Fatal(err)
	}
	var gone []string
	w.until("the end marker", func(ev *clientv3.Event) bool {
		k := string(ev.GetKv().GetKey())
		if ev.Type == clientv3.EventTypeDelete && strings.HasPrefix(k, w.prefix+"/") { //nolint:protogetter // Event is clientv3's own type
			gone = append(gone, k)
		}
		return k == end
	})
	return gone
}

// fleetReplica is r1 alone in a fleet against an etcd of its own, with one TCP target whose
// result it has published.
type fleetReplica struct {
	cli    *clientv3.Client
	etcd   string // etcd's endpoint
	s      *coretest.Server
	target *recorder
	prefix string
}

// startFleetReplica starts r1 under prefix with its target listening on addr, and waits for the
// target's result in etcd.
func startFleetReplica(t *testing.T, addr, prefix string) *fleetReplica {
	t.Helper()
	etcd := etcdtest.New(t)
	r := &fleetReplica{cli: etcd.Client(t), etcd: etcd.Endpoint, target: listen(t, addr), prefix: prefix}
	r.s = coretest.Start(t, fleetLB(r.etcd, prefix, "3s", r.target.addr()))
	waitFor(t, "the replica's result of its target", func() bool { return results(t, r.cli, prefix) == 1 })
	return r
}

// gatedReload is the start of the tests of a reload that changes the fleet's connection: r1 with
// its target's result published, a watch of its keys from then on, and a reload held by the gate
// until the test passes or fails it.
type gatedReload struct {
	*fleetReplica
	logs   *coretest.Log
	lease0 int64       // the member key's lease before the reload
	w      *leaseWatch // the keys under prefix from before the reload on
	g0     int         // goroutines before the reload
	errc   chan error  // the reload's result
}

// startGatedReload starts r1 (startFleetReplica), then a reload to the Corefile that next makes
// of etcd's endpoint, the prefix and the target, held by the gate.
func startGatedReload(t *testing.T, addr, prefix string, next func(endpoint, prefix string, target netip.AddrPort) string) *gatedReload {
	t.Helper()
	leakCheck(t)
	r := &gatedReload{logs: coretest.CaptureLog(t), errc: make(chan error, 1)}
	r.fleetReplica = startFleetReplica(t, addr, prefix)
	m0 := member(t, r.cli, prefix, "r1")
	r.lease0 = m0.Kvs[0].GetLease()
	r.w = watchLeases(t, r.cli, prefix, m0.Header.GetRevision())
	r.g0 = goroutines()
	corefile := gated(next(r.etcd, prefix, r.target.addr()))
	go func() { r.errc <- r.s.Reload(corefile) }()
	return r
}

// newMembership waits for the reload's membership to register r1 under its own lease, and
// returns that lease.
func (r *gatedReload) newMembership() int64 {
	var lease int64
	r.w.until("the new membership's registration", func(ev *clientv3.Event) bool {
		lease = ev.GetKv().GetLease()
		return string(ev.GetKv().GetKey()) == memberKey(r.prefix, "r1") && lease != r.lease0
	})
	return lease
}

// keptUnder checks that no key under the prefix was deleted since the reload began, and that r1's
// member key and its one result are in etcd, the member key under lease (who holds it).
func (r *gatedReload) keptUnder(t *testing.T, lease int64, who string) {
	t.Helper()
	if gone := r.w.deletions(); len(gone) != 0 {
		t.Fatalf("keys deleted: %v\nfleet log:\n%s", gone, strings.Join(r.logs.Lines("Fleet"), "\n"))
	}
	if m := member(t, r.cli, r.prefix, "r1"); len(m.Kvs) != 1 || m.Kvs[0].GetLease() != lease {
		t.Fatalf("member %v, want it under the %s's lease %x", m.Kvs, who, lease)
	}
	if n := results(t, r.cli, r.prefix); n != 1 {
		t.Fatalf("%d results, want the %s's one", n, who)
	}
}

// finish checks that the membership that stays (who) kept its session and goroutines are back to
// their number before the reload, stops the server and checks it left no member key and no lease.
func (r *gatedReload) finish(t *testing.T, who string) {
	t.Helper()
	if n := r.logs.Count("(replica r1): session lost"); n != 0 {
		t.Fatalf("the %s lost its session:\n%s", who, strings.Join(r.logs.Lines("Fleet"), "\n"))
	}
	waitFor(t, "goroutines back to their number before the reload", func() bool { return goroutines() <= r.g0 })
	r.s.Stop()
	if m := member(t, r.cli, r.prefix, "r1"); len(m.Kvs) != 0 || leases(t, r.cli) != 0 {
		t.Fatalf("after shutdown: member %v, %d leases", m.Kvs, leases(t, r.cli))
	}
}

// newTimeout is the Corefile of a reload that changes only the fleet's timeout (3s to 2s): a new
// connection, so a new membership of r1.
func newTimeout(endpoint, prefix string, target netip.AddrPort) string {
	return fleetLB(endpoint, prefix, "2s", target)
}

// F-1 through a real reload that fails: the new instance's membership (the fleet's timeout
// changed) takes the member key over, then the reload fails. Its shutdown must not take the
// surviving membership's keys with its lease: the member key and the result are handed back to
// the survivor's lease without ever being deleted, the survivor keeps its session (no rejoin),
// one lease is left, and goroutines are back to their number.
func TestFleetFailedReloadKeepsKeysF1(t *testing.T) {
	r := startGatedReload(t, "127.0.86.30:0", "/test/failedreload", newTimeout)
	r.newMembership()
	gateResult <- errors.New("a later plugin failed")
	if err := <-r.errc; err == nil {
		t.Fatal("the gated reload succeeded")
	}
	r.keptUnder(t, r.lease0, "survivor")
	waitFor30(t, "one lease left", func() bool { return leases(t, r.cli) == 1 })
	r.finish(t, "survivor")
}

// F-1 through a real reload that succeeds and changes the fleet's timeout: the new membership
// takes the member key and the published result over before the old one's lease is revoked, so
// neither is ever deleted; one member key, one lease (the new one); the heir's own writes of its
// registration then work (a reload that changes the check's region rewrites it under the same
// lease, without a rejoin); goroutines are back to their number.
func TestFleetReloadHandsKeysOverF1(t *testing.T) {
	r := startGatedReload(t, "127.0.86.31:0", "/test/handover", newTimeout)
	cli, s, prefix := r.cli, r.s, r.prefix
	lease1 := r.newMembership()
	gateResult <- nil
	if err := <-r.errc; err != nil {
		t.Fatal(err)
	}
	waitFor30(t, "the old lease gone", func() bool { return leases(t, cli) == 1 })
	r.keptUnder(t, lease1, "heir")
	// The heir registers a change under its lease.
	if err := s.Reload(strings.Replace(newTimeout(r.etcd, prefix, r.target.addr()), "prober us-east1", "prober europe-west1", 1)); err != nil {
		t.Fatal(err)
	}
	waitFor30(t, "the new region registered", func() bool {
		m := member(t, cli, prefix, "r1")
		return len(m.Kvs) == 1 && strings.Contains(string(m.Kvs[0].GetValue()), "europe-west1")
	})
	if m := member(t, cli, prefix, "r1"); m.Kvs[0].GetLease() != lease1 || leases(t, cli) != 1 {
		t.Fatalf("member %v, %d leases: want the heir's lease %x only", m.Kvs, leases(t, cli), lease1)
	}
	r.finish(t, "heir")
}

// F-1: a replica whose member key or published result disappears while its lease lives (the
// revocation or expiry of another membership of the process that held them last, or an operator)
// writes them again under its lease at once, seeing the deletion in its watch; it does not stay
// joined but invisible to the fleet until its registration changes, nor rejoin.
func TestFleetOwnKeysRestoredF1(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	cli := etcd.Client(t)
	const prefix = "/test/restored"
	tg := netip.MustParseAddrPort("127.0.86.32:80")
	script := newRegionScript()
	script.set(tg, "us-east1")
	startReplica(t, testFleetConfig(etcd.Endpoint, prefix, "r1", 1), fleetCheck(time.Second, "us-east1"), script, tg)
	waitFor30(t, "the member and its result", func() bool {
		return len(member(t, cli, prefix, "r1").Kvs) == 1 && results(t, cli, prefix) == 1
	})
	lease := member(t, cli, prefix, "r1").Kvs[0].GetLease()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Txn(ctx).Then(clientv3.OpDelete(memberKey(prefix, "r1")), clientv3.OpDelete(prefix+resultsDir, clientv3.WithPrefix())).Commit(); err != nil {
		t.Fatal(err)
	}
	waitFor30(t, "the member and its result written again", func() bool {
		m := member(t, cli, prefix, "r1")
		return len(m.Kvs) == 1 && results(t, cli, prefix) == 1
	})
	if m := member(t, cli, prefix, "r1"); m.Kvs[0].GetLease() != lease {
		t.Fatalf("member under lease %x, want the session's %x (no rejoin)", m.Kvs[0].GetLease(), lease)
	}
}

// F-3: a replica's published result overwritten with a value no replica can read (a hand-written
// put without a lease) counts as no result on every replica, and the replica writes its own result
// back under its lease at once, as for a deletion. (FuzzFleetMirror found that the watch kept the
// value the key held before, which a replica starting later does not see: the same keys in etcd,
// different tallies.)
func TestFleetOwnResultOverwrittenF3(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	cli := etcd.Client(t)
	const prefix = "/test/overwritten"
	tg := netip.MustParseAddrPort("127.0.86.33:80")
	script := newRegionScript()
	script.set(tg, "us-east1")
	startReplica(t, testFleetConfig(etcd.Endpoint, prefix, "r1", 1), fleetCheck(time.Second, "us-east1"), script, tg)
	key := resultKey{pair: pairKey{check: "web", target: tg.String()}, region: "us-east1"}.key(prefix, "r1")
	get := func() *clientv3.GetResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := cli.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	waitFor30(t, "the member and its result", func() bool {
		return len(member(t, cli, prefix, "r1").Kvs) == 1 && len(get().Kvs) == 1
	})
	lease := member(t, cli, prefix, "r1").Kvs[0].GetLease()
	good := string(get().Kvs[0].GetValue())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, key, `{"healthy":-1}`); err != nil {
		t.Fatal(err)
	}
	waitFor30(t, "the result written back under the session's lease", func() bool {
		r := get()
		return len(r.Kvs) == 1 && r.Kvs[0].GetLease() == lease && string(r.Kvs[0].GetValue()) == good
	})
}

// ownKeysFleet is a joined fleet of replica r1 under lease, whose results of
// web/10.0.0.N:80/us-east1 (N = 1..n) are written in etcd and recorded as published and wanted.
// etcdRev is etcd's current revision.
func etcdRev(ctx context.Context, t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	r, err := cli.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.GetRevision()
}

func ownKeysFleet(t *testing.T, etcd *etcdtest.Server, prefix string, n int) (*fleet, clientv3.LeaseID, []resultKey) {
	t.Helper()
	cli := etcd.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f := newFleet(testFleetConfig(etcd.Endpoint, prefix, "r1", 1))
	t.Cleanup(func() { fleetSeries.Release("r1") })
	f.cli = cli
	g, err := cli.Grant(ctx, 600) // outlives the test: nothing renews it, and no key may expire
	if err != nil {
		t.Fatal(err)
	}
	f.joined, f.lease = true, g.ID
	if _, err := cli.Put(ctx, memberKey(prefix, "r1"), string(f.registration()), clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	f.regVal = string(f.registration())
	keys := make([]resultKey, n)
	for i := range keys {
		k := resultKey{pair: pairKey{check: "web", target: fmt.Sprintf("10.0.0.%d:80", i+1)}, region: "us-east1"}
		v := tally{region: "us-east1", ok: 1, got: 1}
		if _, err := cli.Put(ctx, k.key(prefix, "r1"), encodeResult(v), clientv3.WithLease(g.ID)); err != nil {
			t.Fatal(err)
		}
		f.published[k] = v
		f.want[k.pair] = map[string]tally{k.region: v}
		keys[i] = k
	}
	return f, g.ID, keys
}

// ownKeyIs waits until etcd holds want (under lease) at key k of r1, or nothing when want is "".
func ownKeyIs(t *testing.T, cli *clientv3.Client, prefix string, k resultKey, lease clientv3.LeaseID, want string) {
	t.Helper()
	waitFor30(t, fmt.Sprintf("%s holding %q", k.key(prefix, "r1"), want), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := cli.Get(ctx, k.key(prefix, "r1"))
		if err != nil {
			t.Fatal(err)
		}
		if want == "" {
			return len(r.Kvs) == 0
		}
		return len(r.Kvs) == 1 && string(r.Kvs[0].GetValue()) == want && clientv3.LeaseID(r.Kvs[0].GetLease()) == lease
	})
}

// F-1, F-3: what happened to a replica's own keys while its watch was down (compacted away, a
// hung member, a lost leader) is seen in the list that restarts it, as the watch would have
// seen it: a result deleted or overwritten with an unreadable value is written back, one
// overwritten while being withdrawn is deleted, and a deleted member key is registered again.
// (From a review: the list rebuilt the mirror but left published saying "written", so nothing
// was written back until the target's state changed.)
func TestFleetOwnKeysAfterRelistF1F3(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	cli := etcd.Client(t)
	const prefix = "/test/relistown"
	f, lease, keys := ownKeysFleet(t, etcd, prefix, 3)
	good := encodeResult(f.published[keys[0]])
	delete(f.want, keys[2].pair) // keys[2] is being withdrawn
	f.dirty[keys[2]] = struct{}{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, op := range []clientv3.Op{
		clientv3.OpPut(keys[0].key(prefix, "r1"), `{"healthy":-1}`),
		clientv3.OpDelete(keys[1].key(prefix, "r1")),
		clientv3.OpPut(keys[2].key(prefix, "r1"), `not json`),
		clientv3.OpDelete(memberKey(prefix, "r1")),
	} {
		if _, err := cli.Do(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	rev := etcdRev(ctx, t, cli)
	if _, err := cli.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	fctx, stop := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- f.follow(fctx, lease, 1) }() // from a compacted revision: listed again
	defer stop()
	ownKeyIs(t, cli, prefix, keys[0], lease, good)
	ownKeyIs(t, cli, prefix, keys[1], lease, good)
	ownKeyIs(t, cli, prefix, keys[2], lease, "")
	waitFor30(t, "the member registered again", func() bool {
		m := member(t, cli, prefix, "r1")
		return len(m.Kvs) == 1 && clientv3.LeaseID(m.Kvs[0].GetLease()) == lease
	})
	stop()
	if err := <-errc; err == nil {
		t.Fatal("follow ended without an error")
	}
}

// F-3: a result being withdrawn (no longer wanted, its delete not yet written) that the watch sees
// overwritten with an unreadable value is still deleted: the overwrite does not make the replica
// forget it wrote the key, which would leave a lease-less value under the prefix for good. (From
// a review of the change that made unreadable values count as none.)
func TestFleetWithdrawalAfterOverwriteF3(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	cli := etcd.Client(t)
	const prefix = "/test/withdrawbad"
	f, lease, keys := ownKeysFleet(t, etcd, prefix, 1)
	delete(f.want, keys[0].pair)
	f.dirty[keys[0]] = struct{}{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := keys[0].key(prefix, "r1")
	if _, err := cli.Put(ctx, key, `{"healthy":-1}`); err != nil {
		t.Fatal(err)
	}
	f.apply([]*clientv3.Event{{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{Key: []byte(key), Value: []byte(`{"healthy":-1}`)}}})
	if err := f.write(ctx, lease); err != nil {
		t.Fatal(err)
	}
	ownKeyIs(t, cli, prefix, keys[0], lease, "")
}

// txnHookClient is a client of etcd whose every successful Txn is followed, before its reply is
// returned, by after (given the call's context and request); after's error replaces the reply.
func txnHookClient(t *testing.T, endpoint string, after func(ctx context.Context, req any) error) *clientv3.Client {
	t.Helper()
	hook := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if err := invoker(ctx, method, req, reply, cc, opts...); err != nil || !strings.HasSuffix(method, "/Txn") {
			return err
		}
		return after(ctx, req)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(hook)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// F-3: a result put that etcd applied but whose reply was lost (the write timed out), then
// withdrawn (no state any more, or the region no longer chosen), is deleted: a failed write
// leaves what the key holds unknown. (From a review: the replica thought it had never written
// the key, skipped the delete, and every replica counted the withdrawn result for the rest of the
// session.)
func TestFleetLostReplyThenWithdrawnF3(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	cli := etcd.Client(t)
	const prefix = "/test/lostreply"
	f, lease, _ := ownKeysFleet(t, etcd, prefix, 0)
	var drop atomic.Bool
	f.cli = txnHookClient(t, etcd.Endpoint, func(ctx context.Context, _ any) error {
		if drop.CompareAndSwap(true, false) {
			<-ctx.Done() // applied, but the reply never comes: the call times out
			return status.FromContextError(ctx.Err()).Err()
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k := resultKey{pair: pairKey{check: "web", target: "10.0.0.9:80"}, region: "us-east1"}
	v := tally{region: "us-east1", ok: 0, got: 1, failure: "refused"}
	f.mu.Lock()
	f.want[k.pair] = map[string]tally{k.region: v}
	f.dirty[k] = struct{}{}
	f.mu.Unlock()
	drop.Store(true)
	if err := f.write(ctx, lease); err != nil {
		t.Fatal(err)
	}
	ownKeyIs(t, cli, prefix, k, lease, encodeResult(v)) // etcd has it
	f.mu.RLock()
	failed := f.lastErr != nil
	f.mu.RUnlock()
	if !failed {
		t.Fatal("the write did not fail: the reply was not dropped")
	}
	f.mu.Lock()
	delete(f.want, k.pair)
	f.dirty[k] = struct{}{}
	f.mu.Unlock()
	if err := f.write(ctx, lease); err != nil {
		t.Fatal(err)
	}
	ownKeyIs(t, cli, prefix, k, lease, "")
}

// F-3: this replica's result deleted or overwritten right after its put is applied, with the
// watch showing it before the put's reply is read, is written back: the reply does not erase what
// the watch saw. (From a review: the reply recorded the value as published, and the key kept the
// other value until the target's state changed.) Both for a key not yet published and for one
// that was, and for an overwrite and a deletion.
func TestFleetOverwriteDuringWriteF3(t *testing.T) {
	for _, tc := range []struct {
		name      string
		published bool
		overwrite clientv3.Op
	}{
		{"new key overwritten", false, clientv3.OpPut("", `not json`)},
		{"published key overwritten", true, clientv3.OpPut("", `not json`)},
		{"published key deleted", true, clientv3.OpDelete("")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakCheck(t)
			etcd := etcdtest.New(t)
			cli := etcd.Client(t)
			prefix := "/test/duringwrite"
			n := 0
			if tc.published {
				n = 1
			}
			f, lease, keys := ownKeysFleet(t, etcd, prefix, n)
			k := resultKey{pair: pairKey{check: "web", target: "10.0.0.1:80"}, region: "us-east1"}
			if tc.published {
				k = keys[0]
			}
			key := k.key(prefix, "r1")
			var arm, hooked atomic.Bool
			f.cli = txnHookClient(t, etcd.Endpoint, func(ctx context.Context, req any) error {
				if s, ok := req.(fmt.Stringer); !ok || !strings.Contains(s.String(), key) || !arm.CompareAndSwap(true, false) {
					return nil
				}
				// Right after the put is applied, someone else writes the key; the watch shows
				// it before this reply reaches write.
				op := clientv3.OpPut(key, `not json`)
				if tc.overwrite.IsDelete() {
					op = clientv3.OpDelete(key)
				}
				r, err := cli.Do(ctx, op)
				if err != nil {
					return err
				}
				rev := r.Put()
				var at int64
				if rev != nil {
					at = rev.Header.GetRevision()
				} else {
					at = r.Del().Header.GetRevision()
				}
				for ctx.Err() == nil {
					f.mu.RLock()
					seen := f.seen
					f.mu.RUnlock()
					if seen >= at {
						hooked.Store(true)
						return nil
					}
					time.Sleep(10 * time.Millisecond)
				}
				return ctx.Err()
			})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rev := etcdRev(ctx, t, cli)
			fctx, stop := context.WithCancel(context.Background())
			defer stop()
			errc := make(chan error, 1)
			go func() { errc <- f.follow(fctx, lease, rev) }()
			v := tally{region: "us-east1", ok: 0, got: 1, failure: "refused"}
			arm.Store(true)
			f.mu.Lock()
			f.want[k.pair] = map[string]tally{k.region: v}
			f.dirty[k] = struct{}{}
			f.poke()
			f.mu.Unlock()
			waitFor30(t, "the put, the other write, and the watch showing it", hooked.Load)
			ownKeyIs(t, cli, prefix, k, lease, encodeResult(v))
			stop()
			if err := <-errc; err == nil {
				t.Fatal("follow ended without an error")
			}
		})
	}
}

// followFrom runs f's session from etcd's current revision until the test ends.
func followFrom(t *testing.T, f *fleet, cli *clientv3.Client, lease clientv3.LeaseID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rev := etcdRev(ctx, t, cli)
	fctx, stop := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- f.follow(fctx, lease, rev) }()
	t.Cleanup(func() { stop(); <-errc })
}

// watchCurrent waits until f's watch has delivered everything etcd holds now.
func watchCurrent(t *testing.T, f *fleet, cli *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rev := etcdRev(ctx, t, cli)
	waitFor30(t, "the watch current", func() bool {
		f.mu.RLock()
		defer f.mu.RUnlock()
		return f.seen >= rev
	})
}

// F-3: what the session keeps to order the watch's events against its own writes (inflight,
// lostAt, wroteAt) does not grow with the keys it ever wrote: after results are published and
// withdrawn, and the watch has gone past them, nothing is left. (From a review: lostAt kept an
// entry for each own withdrawal the watch showed after the write's reply.)
func TestFleetOwnKeyBookkeepingBoundedF3(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	cli := etcd.Client(t)
	const prefix = "/test/bookkeeping"
	f, lease, _ := ownKeysFleet(t, etcd, prefix, 0)
	followFrom(t, f, cli, lease)
	const rounds, n = 5, 40
	for round := range rounds {
		keys := make([]resultKey, n)
		f.mu.Lock()
		for i := range keys {
			keys[i] = resultKey{pair: pairKey{check: "web", target: fmt.Sprintf("10.%d.0.%d:80", round, i)}, region: "us-east1"}
			f.want[keys[i].pair] = map[string]tally{"us-east1": {region: "us-east1", ok: 1, got: 1}}
			f.dirty[keys[i]] = struct{}{}
		}
		f.poke()
		f.mu.Unlock()
		waitFor30(t, "published", func() bool {
			f.mu.RLock()
			defer f.mu.RUnlock()
			return len(f.published) == n && len(f.dirty) == 0
		})
		f.mu.Lock()
		for _, k := range keys { // withdrawn: targets removed, or regions no longer chosen
			delete(f.want, k.pair)
			f.dirty[k] = struct{}{}
		}
		f.poke()
		f.mu.Unlock()
		waitFor30(t, "withdrawn", func() bool {
			f.mu.RLock()
			defer f.mu.RUnlock()
			return len(f.published) == 0 && len(f.dirty) == 0
		})
	}
	watchCurrent(t, f, cli)
	waitFor30(t, "the bookkeeping empty", func() bool {
		f.mu.RLock()
		defer f.mu.RUnlock()
		return len(f.inflight)+len(f.lostAt)+len(f.wroteAt) == 0
	})
}

// F-3: an event of this replica's own key that the watch delivers after the reply of a later
// write of that key (a watch on a slower member) is old news: it does not make the replica forget
// what it wrote. (From a review: its own earlier delete, delivered late, made it forget the put
// that followed, so the withdrawal after that skipped the delete and the result stayed under the
// lease for the session.)
func TestFleetStaleEventAfterWriteF3(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	cli := etcd.Client(t)
	const prefix = "/test/staleevent"
	f, lease, keys := ownKeysFleet(t, etcd, prefix, 1)
	k := keys[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rev := etcdRev(ctx, t, cli)
	wch := cli.Watch(ctx, k.key(prefix, "r1"), clientv3.WithRev(rev+1))
	write := func(want *tally) { t.Helper(); writeWant(ctx, t, f, lease, k, want) }
	write(nil)                                                           // withdrawn: deleted at R0
	write(&tally{region: "us-east1", ok: 0, got: 1, failure: "refused"}) // chosen again: put at R1
	wr := <-wch
	if len(wr.Events) == 0 || wr.Events[0].Type != clientv3.EventTypeDelete { //nolint:protogetter // Event is clientv3's own type
		t.Fatalf("the first event is not the delete: %+v", wr.Events)
	}
	f.apply(wr.Events[:1]) // the delete of R0, delivered only now
	write(nil)             // withdrawn again
	ownKeyIs(t, cli, prefix, k, lease, "")
}

// F-1: a failed reload after this replica's result changed without it knowing the value: the
// result was handed over to the new membership, which never joined (or ended), and the surviving
// one publishes again what etcd held, as its watch showed it: its own write whose reply was lost,
// or what the leaving membership wrote after the hand-over. (From reviews: after a lost reply
// reclaim deleted the result; a first fix republished the value handed over, older than the
// leaving membership's.)
func TestFleetReclaimPublishesWhatWasHeldF1(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lostReply bool // else: the leaving membership wrote a newer value under its lease
	}{{"own write, reply lost", true}, {"newer value of the leaving membership", false}} {
		t.Run(tc.name, func(t *testing.T) {
			leakCheck(t)
			etcd := etcdtest.New(t)
			cli := etcd.Client(t)
			const prefix = "/test/reclaimheld"
			f, lease, keys := ownKeysFleet(t, etcd, prefix, 1)
			k := keys[0]
			var drop atomic.Bool
			f.cli = txnHookClient(t, etcd.Endpoint, func(ctx context.Context, _ any) error {
				if drop.CompareAndSwap(true, false) {
					<-ctx.Done() // applied, but the reply never comes
					return status.FromContextError(ctx.Err()).Err()
				}
				return nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rev := etcdRev(ctx, t, cli)
			wch := cli.Watch(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
			heir := newFleet(testFleetConfig("http://127.0.0.1:1", prefix, "r1", 1))
			t.Cleanup(func() { fleetSeries.Release("r1") })
			v1 := tally{region: "us-east1", ok: 0, got: 1, failure: "refused"}
			if tc.lostReply {
				f.mu.Lock()
				f.want[k.pair] = map[string]tally{k.region: v1}
				f.dirty[k] = struct{}{}
				f.mu.Unlock()
				drop.Store(true)
				if err := f.write(ctx, lease); err != nil {
					t.Fatal(err)
				}
				f.handOver(k.pair, heir)
			} else {
				f.handOver(k.pair, heir)
				g, err := cli.Grant(ctx, 600)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := cli.Put(ctx, k.key(prefix, "r1"), encodeResult(v1), clientv3.WithLease(g.ID)); err != nil {
					t.Fatal(err)
				}
			}
			f.delivered(<-wch) // the watch shows the put
			if _, err := f.reclaim(ctx, lease); err != nil {
				t.Fatal(err)
			}
			ownKeyIs(t, cli, prefix, k, lease, encodeResult(v1))
		})
	}
}

// F-1, F-3: a result handed over and back, then withdrawn (its target removed), is deleted, and a
// failed reload after that does not publish it again. (From a review: a record of the hand-over
// outlived it and made reclaim bring the removed target's result back for the session.)
func TestFleetReclaimAfterHandBackAndWithdrawalF1F3(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	cli := etcd.Client(t)
	const prefix = "/test/handback"
	f, lease, keys := ownKeysFleet(t, etcd, prefix, 1)
	k := keys[0]
	heir := newFleet(testFleetConfig("http://127.0.0.1:1", prefix, "r1", 1))
	t.Cleanup(func() { fleetSeries.Release("r1") })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f.handOver(k.pair, heir)
	heir.handOver(k.pair, f) // a reload, then another back
	if err := f.write(ctx, lease); err != nil {
		t.Fatal(err)
	}
	f.forget(k.pair) // the target removed
	if _, err := f.reclaim(ctx, lease); err != nil {
		t.Fatal(err)
	}
	ownKeyIs(t, cli, prefix, k, lease, "")
	f.mu.RLock()
	_, wanted := f.want[k.pair]
	f.mu.RUnlock()
	if wanted {
		t.Fatal("the removed target's result is wanted again after reclaim")
	}
}

// F-3, F-4: a watch that is behind catches up in batches of at most 1000 revisions, each stamped
// with etcd's current revision, and etcd 3.4 answers a progress request (each beat sends one)
// with its current revision too, even while the watch is still catching up. Neither makes the
// session forget its last write of a key: an old event of that key arriving after them is still
// known as old (the session drops what it keeps of a write when the write's own event arrives).
// (From two reviews: a batch's header, then a progress answer, made it forget the write, and
// the late delete that followed made it forget the put, so the withdrawal after that was skipped.)
func TestFleetWatchBehindF3F4(t *testing.T) {
	for _, tc := range []struct {
		name     string
		others   int  // revisions written by another replica before this one's writes
		progress bool // the beat's progress request while the watch is behind
	}{{"batch header", 1200, false}, {"progress answer", 3000, true}} {
		t.Run(tc.name, func(t *testing.T) {
			leakCheck(t)
			etcd := etcdtest.New(t)
			cli := etcd.Client(t)
			const prefix = "/test/behind"
			f, lease, keys := ownKeysFleet(t, etcd, prefix, 1)
			k := keys[0]
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			from := etcdRev(ctx, t, cli)
			for i := range tc.others {
				if _, err := cli.Put(ctx, prefix+resultsDir+"web/10.0.9.1:80/us-east1/other", fmt.Sprintf(`{"nonce":"o","healthy":%d,"decided":10}`, i%10)); err != nil {
					t.Fatal(err)
				}
			}
			write := func(want *tally) { t.Helper(); writeWant(ctx, t, f, lease, k, want) }
			write(nil)                                                           // withdrawn: deleted at R0
			write(&tally{region: "us-east1", ok: 0, got: 1, failure: "refused"}) // chosen again: put at R1
			// The watch, from before all that, delivers it now, as the session's reader does.
			wch := cli.Watch(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(from+1), clientv3.WithProgressNotify())
			if tc.progress {
				if err := cli.RequestProgress(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for sawDelete := false; !sawDelete; {
				wr := <-wch
				if err := wr.Err(); err != nil {
					t.Fatal(err)
				}
				if wr.IsProgressNotify() {
					t.Logf("progress answer at %d while behind", wr.Header.GetRevision())
				}
				for _, ev := range wr.Events {
					sawDelete = sawDelete || (ev.Type == clientv3.EventTypeDelete && string(ev.Kv.GetKey()) == k.key(prefix, "r1")) //nolint:protogetter // Event is clientv3's own type
				}
				f.delivered(wr)
			}
			write(nil) // withdrawn again
			ownKeyIs(t, cli, prefix, k, lease, "")
		})
	}
}

// F-1: a reload that moves the fleet to endpoints the new membership cannot reach, and then fails.
// The probe was handed to the new membership, whose session never joined and so dropped it; the
// surviving membership takes the result back (reclaim) and no key is ever deleted. (From a review:
// the result was withdrawn and came back only at the target's next round.)
func TestFleetFailedReloadUnjoinedHeirKeepsKeysF1(t *testing.T) {
	nobody := "http://127.0.0.1:" + coretest.FreePort(t)
	r := startGatedReload(t, "127.0.86.40:0", "/test/unjoinedheir", func(_, prefix string, target netip.AddrPort) string {
		return fleetLB(nobody, prefix, "1s", target)
	})
	waitFor30(t, "the new membership has failed to join once", func() bool { return r.logs.Count("(replica r1): not joined yet") >= 1 })
	gateResult <- errors.New("a later plugin failed")
	if err := <-r.errc; err == nil {
		t.Fatal("the gated reload succeeded")
	}
	r.keptUnder(t, r.lease0, "survivor")
	r.s.Stop()
}

// F-1, F-3: a region of a pair withdrawn just before the pair is handed over (its delete not yet
// written) is deleted by the reclaim of a failed reload, not published again: the hand-over
// passes the regions this replica still publishes, not the pair. (From a review: reclaim
// republished every published region of a handed pair.)
func TestFleetReclaimKeepsRegionWithdrawnBeforeHandOverF1F3(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	cli := etcd.Client(t)
	const prefix = "/test/handedregion"
	f, lease, keys := ownKeysFleet(t, etcd, prefix, 1)
	kA := keys[0]
	kB := resultKey{pair: kA.pair, region: "us-west1"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vB := tally{region: "us-west1", ok: 1, got: 1}
	f.mu.Lock()
	f.want[kA.pair][kB.region] = vB
	f.dirty[kB] = struct{}{}
	f.mu.Unlock()
	if err := f.write(ctx, lease); err != nil {
		t.Fatal(err)
	}
	ownKeyIs(t, cli, prefix, kB, lease, encodeResult(vB))
	// A round: us-west1 no longer chosen (publish withdraws it); the write has not run yet.
	f.mu.Lock()
	delete(f.want[kA.pair], kB.region)
	f.dirty[kB] = struct{}{}
	f.mu.Unlock()
	heir := newFleet(testFleetConfig("http://127.0.0.1:1", prefix, "r1", 1))
	t.Cleanup(func() { fleetSeries.Release("r1") })
	f.handOver(kA.pair, heir) // a reload; the heir never joins and leaves
	if _, err := f.reclaim(ctx, lease); err != nil {
		t.Fatal(err)
	}
	f.mu.RLock()
	_, wanted := f.want[kA.pair][kB.region]
	f.mu.RUnlock()
	r, err := cli.Get(ctx, kB.key(prefix, "r1"))
	if err != nil {
		t.Fatal(err)
	}
	if wanted || len(r.Kvs) != 0 {
		t.Fatalf("withdrawn region revived by reclaim: wanted=%v, etcd holds %d key(s) %q", wanted, len(r.Kvs), r.Kvs)
	}
}

// writeWant has f want v published for k (nil: withdrawn) and writes it at once.
func writeWant(ctx context.Context, t *testing.T, f *fleet, lease clientv3.LeaseID, k resultKey, v *tally) {
	t.Helper()
	f.mu.Lock()
	if v == nil {
		delete(f.want, k.pair)
	} else {
		f.want[k.pair] = map[string]tally{k.region: *v}
	}
	f.dirty[k] = struct{}{}
	f.mu.Unlock()
	if err := f.write(ctx, lease); err != nil {
		t.Fatal(err)
	}
}
