package healthcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// errDuplicate: another live process registered this replica name.
var errDuplicate = errors.New("replica name in use")

// start creates the client and starts the session loop. Creating the client does not connect,
// so it never blocks startup (F-4).
func (f *fleet) start() {
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.done = make(chan struct{})
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   f.cfg.Endpoints,
		DialTimeout: f.cfg.Timeout,
		TLS:         f.cfg.TLS,
		Username:    f.cfg.Username,
		Password:    f.cfg.Password,
		Logger:      zap.NewNop(),
		// Reconnect within a few seconds of etcd's return, not after gRPC's two-minute backoff.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: fleetRetry},
			MinConnectTimeout: f.cfg.Timeout,
		})},
	})
	if err != nil {
		// Only a malformed configuration fails here; parse checked it. Stay alone.
		log.Errorf("Fleet %s: no etcd client, probing and deciding alone: %v", f.cfg.Prefix, err)
		close(f.done)
		return
	}
	f.cli = cli
	go f.run(ctx)
}

// stop ends the session, revokes the lease (the member and its results leave at once) and
// closes the client, waiting for every goroutine it started.
func (f *fleet) stop() {
	f.cancel()
	<-f.done
	if f.cli != nil {
		f.mu.RLock()
		lease := f.lease
		if !f.joined {
			lease = f.old
		}
		f.mu.RUnlock()
		if lease != 0 {
			ctx, cancel := context.WithTimeout(context.Background(), f.cfg.Timeout)
			_, _ = f.cli.Revoke(ctx, lease)
			cancel()
		}
		f.cli.Close()
	}
	fleetSeries.Release(f.cfg.Replica)
}

// run keeps a session up until ctx ends: join, follow, and after a loss join again (F-4).
func (f *fleet) run(ctx context.Context) {
	defer close(f.done)
	first := true
	for {
		err := f.session(ctx)
		if ctx.Err() != nil {
			return
		}
		f.lost(err, first)
		first = false
		wait := fleetRetry
		if errors.Is(err, errDuplicate) {
			wait = fleetTTL // the other process's lease would expire by then if it died
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// lost ends a session: this replica probes and decides alone until the next one (F-4). It
// logs once per outage, and says why when the first join fails (startup never waits).
func (f *fleet) lost(err error, first bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.joined {
		f.old = f.lease
	}
	f.joined, f.lease = false, 0
	clear(f.want)
	clear(f.published)
	clear(f.dirty)
	if errors.Is(err, errDuplicate) {
		return // logged by register
	}
	if !f.fallback || first {
		what := "etcd unreachable"
		if first {
			what = "not joined yet"
		}
		log.Warningf("Fleet %s (replica %s): %s, probing and deciding alone: %v", f.cfg.Prefix, f.cfg.Replica, what, err)
	}
	f.setFallback(true)
}

// setFallback exports the fallback state; f.mu is held.
func (f *fleet) setFallback(on bool) {
	f.fallback = on
	if on {
		f.gFallback.Set(1)
	} else {
		f.gFallback.Set(0)
	}
}

func (f *fleet) fail(err error) error {
	f.cErrors.Inc()
	return err
}

// timeout returns a context for one etcd request.
func (f *fleet) timeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, f.cfg.Timeout)
}

// session joins the fleet and follows it until the lease or the watch is lost. Joining is: a
// new lease, the registration under it, a list of the prefix, a watch from the list's revision.
func (f *fleet) session(ctx context.Context) error {
	f.mu.RLock()
	old := f.old
	f.mu.RUnlock()
	if old != 0 {
		// A lease of an earlier session may still live (etcd keeps leases through its restarts):
		// revoke it so its stale results go at once.
		c, cancel := f.timeout(ctx)
		_, err := f.cli.Revoke(c, old)
		cancel()
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return f.fail(fmt.Errorf("revoking the previous lease: %w", err))
		}
		f.mu.Lock()
		f.old = 0
		f.mu.Unlock()
	}
	c, cancel := f.timeout(ctx)
	g, err := f.cli.Grant(c, int64(fleetTTL/time.Second))
	cancel()
	if err != nil {
		return f.fail(fmt.Errorf("lease: %w", err))
	}
	lease := g.ID
	if err := f.claim(ctx, lease); err != nil {
		c, cancel := f.timeout(ctx)
		_, _ = f.cli.Revoke(c, lease)
		cancel()
		return err
	}
	rev, err := f.list(ctx)
	if err != nil {
		c, cancel := f.timeout(ctx)
		_, _ = f.cli.Revoke(c, lease)
		cancel()
		return err
	}
	f.mu.Lock()
	now := f.now()
	f.lease, f.joined, f.since, f.confirmed, f.dup = lease, true, now, now, false
	f.setFallback(false)
	members := len(f.mirror.members)
	f.mu.Unlock()
	log.Infof("Fleet %s (replica %s): joined (lease %x, %d members); the fleet decides from the next interval", f.cfg.Prefix, f.cfg.Replica, int64(lease), members)
	return f.follow(ctx, lease, rev)
}

// claim registers this replica under lease. The name must be free, or held by this process
// (a lease of an earlier session); a name another live process holds is a duplicate: logged,
// and this replica stays alone until the name is free.
func (f *fleet) claim(ctx context.Context, lease clientv3.LeaseID) error {
	key := memberKey(f.cfg.Prefix, f.cfg.Replica)
	f.mu.Lock()
	val := string(f.registration())
	f.regDue, f.regVal = false, val
	f.mu.Unlock()
	c, cancel := f.timeout(ctx)
	defer cancel()
	resp, err := f.cli.Txn(c).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, val, clientv3.WithLease(lease))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return f.fail(fmt.Errorf("registering: %w", err))
	}
	if resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	other := ""
	if len(kvs) > 0 {
		var v memberValue
		if json.Unmarshal(kvs[0].GetValue(), &v) == nil && v.Nonce == f.nonce {
			// Ours, from a lease the revocation missed: take it over.
			if _, err := f.cli.Put(c, key, val, clientv3.WithLease(lease)); err != nil {
				return f.fail(fmt.Errorf("registering: %w", err))
			}
			return nil
		}
		other = fmt.Sprintf(" (lease %x)", kvs[0].GetLease())
	}
	f.mu.Lock()
	first := !f.dup
	f.dup = true
	f.setFallback(true)
	f.mu.Unlock()
	if first {
		log.Errorf("Fleet %s: replica name %q is already registered by another live process%s: give each replica its own name (replica NAME); probing and deciding alone until the name is free", f.cfg.Prefix, f.cfg.Replica, other)
	}
	return errDuplicate
}

// list reads the whole prefix into a new mirror and returns its revision.
func (f *fleet) list(ctx context.Context) (int64, error) {
	c, cancel := f.timeout(ctx)
	resp, err := f.cli.Get(c, f.cfg.Prefix+"/", clientv3.WithPrefix())
	cancel()
	if err != nil {
		return 0, f.fail(fmt.Errorf("listing %s: %w", f.cfg.Prefix, err))
	}
	m := newMirror()
	for _, kv := range resp.Kvs {
		if _, _, _, err := m.apply(f.cfg.Prefix, string(kv.GetKey()), kv.GetValue()); err != nil {
			log.Warningf("Fleet %s (replica %s): ignoring %v", f.cfg.Prefix, f.cfg.Replica, err)
		}
	}
	f.mu.Lock()
	changed := !sameMembers(f.mirror.members, m.members)
	f.mirror = m
	if changed {
		f.viewChanged()
	}
	f.mu.Unlock()
	if changed {
		f.membersChanged()
	}
	return resp.Header.GetRevision(), nil
}

func sameMembers(a, b map[string]memberValue) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !sameChecks(v.Checks, w.Checks) {
			return false
		}
	}
	return true
}

// follow applies the watch to the mirror, renews the lease every beat and writes what this
// replica publishes, until the lease is lost or ctx ends. A watch that etcd compacted away is
// listed again and restarted from the list's revision; one that breaks otherwise is restarted
// by the client from the last revision it delivered.
func (f *fleet) follow(ctx context.Context, lease clientv3.LeaseID, rev int64) error {
	wch, unwatch := f.watch(ctx, rev)
	defer func() { unwatch() }()
	beat := time.NewTicker(fleetBeat)
	defer beat.Stop()
	if err := f.write(ctx, lease); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case wr, ok := <-wch:
			if !ok {
				return errors.New("watch closed")
			}
			if err := wr.Err(); err != nil {
				f.cErrors.Inc()
				if !errors.Is(err, rpctypes.ErrCompacted) {
					return fmt.Errorf("watch: %w", err)
				}
				// Events were compacted away before we read them: list again, watch from there.
				if rev, err = f.list(ctx); err != nil {
					return err
				}
				unwatch()
				wch, unwatch = f.watch(ctx, rev)
				continue
			}
			f.apply(wr.Events)
			f.confirm()
		case <-beat.C:
			c, cancel := f.timeout(ctx)
			_, err := f.cli.KeepAliveOnce(c, lease)
			cancel()
			if err != nil {
				f.cErrors.Inc()
				if errors.Is(err, rpctypes.ErrLeaseNotFound) {
					return fmt.Errorf("lease %x expired", int64(lease))
				}
				f.stale(err)
				continue
			}
			f.confirm()
			if err := f.write(ctx, lease); err != nil {
				return err
			}
		case <-f.kick:
			if err := f.write(ctx, lease); err != nil {
				return err
			}
		}
	}
}

// watch watches the prefix from the revision after rev, until the returned stop.
func (f *fleet) watch(ctx context.Context, rev int64) (clientv3.WatchChan, context.CancelFunc) {
	wctx, cancel := context.WithCancel(ctx)
	return f.cli.Watch(wctx, f.cfg.Prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1)), cancel
}

// apply records watch events in the mirror.
func (f *fleet) apply(evs []*clientv3.Event) {
	f.mu.Lock()
	changed := false
	for _, ev := range evs {
		var val []byte
		if ev.Type == clientv3.EventTypePut { //nolint:protogetter // Event is clientv3's own type
			val = ev.GetKv().GetValue()
		}
		replica, member, ch, err := f.mirror.apply(f.cfg.Prefix, string(ev.GetKv().GetKey()), val)
		if err != nil {
			log.Warningf("Fleet %s (replica %s): ignoring %v", f.cfg.Prefix, f.cfg.Replica, err)
			continue
		}
		changed = changed || ch
		if !member && replica != f.cfg.Replica {
			f.cReceived.Inc()
		}
	}
	if changed {
		f.viewChanged()
	}
	f.mu.Unlock()
	if changed {
		f.membersChanged()
	}
}

// confirm records that etcd answered. After an outage the view is current again from now: the
// fleet decides again one interval later, once every member has published again (F-4).
func (f *fleet) confirm() {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if now.Sub(f.confirmed) > fleetBeat+f.cfg.Timeout {
		f.since = now
	}
	f.confirmed = now
	if f.fallback && f.joined && !f.dup {
		log.Infof("Fleet %s (replica %s): etcd answers again, rejoining, the fleet decides from the next interval", f.cfg.Prefix, f.cfg.Replica)
		f.setFallback(false)
	}
}

// stale notes a failed renewal: past the timeout this replica probes and decides alone, logged
// once (F-4). The session goes on: etcd may come back before the lease expires.
func (f *fleet) stale(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fallback || f.now().Sub(f.confirmed) <= fleetBeat+f.cfg.Timeout {
		return
	}
	log.Warningf("Fleet %s (replica %s): etcd unreachable for %.1fs, probing and deciding alone: %v", f.cfg.Prefix, f.cfg.Replica, f.now().Sub(f.confirmed).Seconds(), err)
	f.setFallback(true)
}

// write sends the registration when it changed and the results that changed, in transactions
// of at most fleetMaxOps operations, all under lease. A failed write stays due and is retried at
// the next beat; a lost lease ends the session.
func (f *fleet) write(ctx context.Context, lease clientv3.LeaseID) error {
	f.mu.Lock()
	val := string(f.registration())
	reg := f.regDue && val != f.regVal // a reload with the same checks writes nothing
	f.regDue = false
	f.mu.Unlock()
	if reg {
		key := memberKey(f.cfg.Prefix, f.cfg.Replica)
		c, cancel := f.timeout(ctx)
		resp, err := f.cli.Txn(c).
			If(clientv3.Compare(clientv3.LeaseValue(key), "=", lease)).
			Then(clientv3.OpPut(key, val, clientv3.WithLease(lease))).
			Commit()
		cancel()
		if err != nil {
			f.mu.Lock()
			f.regDue = true
			f.mu.Unlock()
			return f.writeErr(err)
		}
		if !resp.Succeeded {
			return errors.New("the member key is gone")
		}
		f.mu.Lock()
		f.regVal = val
		f.mu.Unlock()
	}
	for {
		f.mu.Lock()
		ops := make([]clientv3.Op, 0, min(len(f.dirty), fleetMaxOps))
		keys := make([]resultKey, 0, cap(ops))
		vals := make([]string, 0, cap(ops))
		for k := range f.dirty {
			if len(ops) == fleetMaxOps {
				break
			}
			delete(f.dirty, k)
			v, want := f.want[k.pair][k.region]
			pv, had := f.published[k]
			switch {
			case want && (!had || pv != v):
				ops = append(ops, clientv3.OpPut(k.key(f.cfg.Prefix, f.cfg.Replica), v, clientv3.WithLease(lease)))
			case !want && had:
				ops = append(ops, clientv3.OpDelete(k.key(f.cfg.Prefix, f.cfg.Replica)))
			default:
				continue
			}
			keys = append(keys, k)
			vals = append(vals, v)
		}
		f.mu.Unlock()
		if len(ops) == 0 {
			return nil
		}
		c, cancel := f.timeout(ctx)
		_, err := f.cli.Txn(c).Then(ops...).Commit()
		cancel()
		f.mu.Lock()
		if err != nil {
			for _, k := range keys {
				f.dirty[k] = struct{}{}
			}
			f.mu.Unlock()
			return f.writeErr(err)
		}
		for i, k := range keys {
			if ops[i].IsDelete() {
				delete(f.published, k)
			} else {
				f.published[k] = vals[i]
			}
		}
		f.mu.Unlock()
		f.cPublished.Add(float64(len(ops)))
	}
}

// writeErr counts a failed write; only a lost lease ends the session.
func (f *fleet) writeErr(err error) error {
	f.cErrors.Inc()
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("lease expired: %w", err)
	}
	f.stale(err)
	return nil
}
