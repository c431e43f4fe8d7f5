package healthcheck

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

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

// F-3: etcd 3.4 answers a progress request (each beat sends one) with its current revision even
// while the watch is still behind, catching up: an old event of this replica's own key that comes
// after it is still known as old (the session drops what it keeps of its write when the write's
// own event arrives, not when the watch says it has reached a revision). (From a review: the
// progress notification made the session forget its write, and the late delete that followed
// made it forget the put.)
func TestFleetProgressWhileBehindF3(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	cli := etcd.Client(t)
	const prefix = "/test/progressbehind"
	f, lease, keys := ownKeysFleet(t, etcd, prefix, 1)
	k := keys[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	from := r.Header.GetRevision()
	for i := range 3000 {
		if _, err := cli.Put(ctx, prefix+resultsDir+"web/10.0.9.1:80/us-east1/other", fmt.Sprintf(`{"nonce":"o","healthy":%d,"decided":10}`, i%10)); err != nil {
			t.Fatal(err)
		}
	}
	write := func(want *tally) { t.Helper(); writeWant(ctx, t, f, lease, k, want) }
	write(nil)
	write(&tally{region: "us-east1", ok: 0, got: 1, failure: "refused"})
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wch := cli.Watch(wctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(from+1), clientv3.WithProgressNotify())
	progress := 0
	for sawDelete, first := false, true; !sawDelete; first = false {
		if first {
			// the beat's progress request, while the watch is behind
			if err := cli.RequestProgress(wctx); err != nil {
				t.Fatal(err)
			}
		}
		wr := <-wch
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		if wr.IsProgressNotify() {
			progress++
			t.Logf("progress notification at %d while behind", wr.Header.GetRevision())
		}
		for _, ev := range wr.Events {
			sawDelete = sawDelete || (ev.Type == clientv3.EventTypeDelete && string(ev.Kv.GetKey()) == k.key(prefix, "r1")) //nolint:protogetter // Event is clientv3's own type
		}
		f.delivered(wr)
	}
	t.Logf("%d progress notification(s) before the late delete", progress)
	write(nil)
	ownKeyIs(t, cli, prefix, k, lease, "")
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
