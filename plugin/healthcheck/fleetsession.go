package healthcheck

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/prototext"
)

var (
	// errDuplicate: another live process registered this replica name.
	errDuplicate = errors.New("replica name in use")
	// errSuperseded: a newer membership of this process has the name (fleet.superseded).
	errSuperseded = errors.New("superseded by a newer membership of this process")
)

// keepaliveTime is how often gRPC pings an idle etcd connection, so a member that stopped
// answering (a hung host) is noticed and its streams move to another member. gRPC does not ping
// more often than every 10 s.
const keepaliveTime = 10 * time.Second

// start creates the client and starts the session loop. Creating the client does not connect,
// so it never blocks startup (F-4).
func (f *fleet) start() {
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.done = make(chan struct{})
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            f.cfg.Endpoints,
		DialTimeout:          f.cfg.Timeout,
		DialKeepAliveTime:    keepaliveTime,
		DialKeepAliveTimeout: f.cfg.Timeout,
		TLS:                  f.cfg.TLS,
		Username:             f.cfg.Username,
		Password:             f.cfg.Password,
		Logger:               zap.NewNop(),
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

// halt ends the session and waits for every goroutine it started: nothing is written after it.
func (f *fleet) halt() {
	f.cancel()
	<-f.done
}

// end revokes the leases when revoke (the member and its results leave at once; otherwise they
// expire by themselves) and closes the client, waiting at most fleetRevokeWait for etcd. The
// session has halted.
func (f *fleet) end(revoke bool) {
	if f.cli != nil {
		f.mu.RLock()
		leases := []clientv3.LeaseID{f.lease, f.old}
		f.mu.RUnlock()
		ctx, cancel := context.WithTimeout(context.Background(), min(fleetRevokeWait, f.cfg.Timeout))
		for _, l := range leases {
			if l != 0 && revoke {
				_, _ = f.cli.Revoke(ctx, l)
			}
		}
		cancel()
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
			wait = leaseTTL(f.cfg.Timeout) // the other process's lease would expire by then if it died
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
// logs once per outage, naming the endpoints and what connecting to them says, and says why
// when the first join fails (startup never waits).
func (f *fleet) lost(err error, first bool) {
	f.mu.Lock()
	if f.lease != 0 {
		f.old = f.lease
	}
	f.joined, f.lease = false, 0
	clear(f.want)
	clear(f.published)
	clear(f.dirty)
	clear(f.lostAt)
	clear(f.inflight)
	clear(f.wroteAt)
	clear(f.handed)
	f.unwritten, f.alarm, f.lastErr = time.Time{}, "", err
	f.setFallback(true)
	quiet := errors.Is(err, errDuplicate) || errors.Is(err, errSuperseded) || (f.outage && !first)
	f.outage = true
	f.mu.Unlock()
	if quiet {
		return // logged by claim, by the newer membership, or when the outage began
	}
	what := "session lost"
	if first {
		what = "not joined yet"
	}
	log.Warningf("Fleet %s (replica %s): %s, probing and deciding alone: %v%s", f.cfg.Prefix, f.cfg.Replica, what, err, f.reach())
}

// reach connects to each endpoint (TCP, then TLS when configured) and returns, for the log
// line, the first failure with its endpoint; "" when every endpoint accepts.
func (f *fleet) reach() string {
	d := net.Dialer{Timeout: min(f.cfg.Timeout, time.Second)}
	for _, e := range f.cfg.Endpoints {
		u, err := url.Parse(e)
		if err != nil {
			continue
		}
		c, err := d.Dial("tcp", u.Host)
		if err == nil && f.cfg.TLS != nil {
			tc := f.cfg.TLS.Clone()
			tc.ServerName = u.Hostname()
			_ = c.SetDeadline(time.Now().Add(d.Timeout))
			t := tls.Client(c, tc)
			err = t.Handshake()
			c = t
		}
		if err != nil {
			return fmt.Sprintf(" (%s: %v)", e, err)
		}
		c.Close()
	}
	return ""
}

func (f *fleet) fail(err error) error {
	f.cErrors.Inc()
	f.mu.Lock()
	f.lastErr = err
	f.mu.Unlock()
	return err
}

// timeout returns a context for one etcd request.
func (f *fleet) timeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, f.cfg.Timeout)
}

// session joins the fleet and follows it until the lease is lost. Joining is: a new lease, the
// registration under it, a list of the prefix, a watch from the list's revision.
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
	if f.superseded.Load() {
		return errSuperseded
	}
	c, cancel := f.timeout(ctx)
	g, err := f.cli.Grant(c, int64(leaseTTL(f.cfg.Timeout)/time.Second))
	cancel()
	if err != nil {
		return f.fail(fmt.Errorf("lease: %w", err))
	}
	lease := g.ID
	// Recorded before anything is written under it: a stop from now on revokes it (F-1).
	f.mu.Lock()
	f.lease = lease
	f.mu.Unlock()
	if err := f.claim(ctx, lease); err != nil {
		f.drop(ctx, lease)
		return err
	}
	rev, err := f.list(ctx)
	if err != nil {
		f.drop(ctx, lease)
		return err
	}
	f.mu.Lock()
	now := f.now()
	f.joined, f.since, f.heard, f.dup, f.outage = true, now, now, false, false
	what := "joined"
	if f.rejoin {
		what = "rejoined"
	}
	f.rejoin = true
	members := len(f.mirror.members)
	f.mu.Unlock()
	log.Infof("Fleet %s (replica %s): %s (lease %x, %d members); the fleet decides from the next interval", f.cfg.Prefix, f.cfg.Replica, what, int64(lease), members)
	return f.follow(ctx, lease, rev)
}

// drop revokes a lease whose session did not start, waiting at most fleetRevokeWait. A lease it
// could not revoke is left to the next session or to end; so is one of a session that ended
// because the membership is ending (ctx done: a stop or a reload while joining), since end knows
// whether another membership of the name still needs what is under it.
func (f *fleet) drop(ctx context.Context, lease clientv3.LeaseID) {
	if ctx.Err() != nil {
		return
	}
	c, cancel := context.WithTimeout(context.Background(), min(fleetRevokeWait, f.cfg.Timeout))
	_, err := f.cli.Revoke(c, lease)
	cancel()
	if err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) {
		f.mu.Lock()
		if f.lease == lease {
			f.lease = 0
		}
		f.mu.Unlock()
	}
}

// claim registers this replica under lease. The name must be free, or held by this process
// (a lease of an earlier session or membership); a name another live process holds is a
// duplicate: logged, and this replica stays alone until the name is free.
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
		if json.Unmarshal(kvs[0].GetValue(), &v) == nil && v.Nonce == processNonce {
			// This process's, from a lease the revocation missed or another membership: take it,
			// unless a newer membership has the name now (it may have taken the key already).
			if f.superseded.Load() {
				return errSuperseded
			}
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
	f.mu.Unlock()
	if first {
		log.Errorf("Fleet %s: replica name %q is already registered by another live process%s: give each replica its own name (replica NAME); probing and deciding alone until the name is free", f.cfg.Prefix, f.cfg.Replica, other)
	}
	return errDuplicate
}

// list reads the whole prefix into a new mirror and returns its revision.
func (f *fleet) list(ctx context.Context) (int64, error) {
	asked := f.now()
	c, cancel := f.timeout(ctx)
	resp, err := f.cli.Get(c, f.cfg.Prefix+"/", clientv3.WithPrefix())
	cancel()
	if err != nil {
		return 0, f.fail(fmt.Errorf("listing %s: %w", f.cfg.Prefix, err))
	}
	m := newMirror()
	others := 0 // results of other replicas: received, as those the watch brings later
	own := make(map[resultKey]*mvccpb.KeyValue)
	var memberLease int64
	for _, kv := range resp.Kvs {
		c, err := m.apply(f.cfg.Prefix, string(kv.GetKey()), kv.GetValue())
		if err != nil {
			log.Warningf("Fleet %s (replica %s): ignoring %v", f.cfg.Prefix, f.cfg.Replica, err)
		}
		switch {
		case c.replica != f.cfg.Replica:
			if err == nil && c.result {
				others++
			}
		case c.member:
			memberLease = kv.GetLease()
		case c.result:
			own[resultKey{pair: c.pair, region: c.region}] = kv
		}
	}
	f.cReceived.Add(float64(others))
	rev := resp.Header.GetRevision()
	f.mu.Lock()
	f.ownKeysListed(own, memberLease)
	// The watch starts after the list's revision, which is after every write of this session
	// (they run on this goroutine): no event older than one of them can come any more.
	clear(f.wroteAt)
	changed := !sameMembers(f.mirror.members, m.members)
	f.mirror = m
	if changed {
		f.viewChanged()
	}
	// The list is a linearizable read: the new mirror is current as of when it was asked.
	f.seen = rev
	f.settle()
	f.current(asked)
	f.mu.Unlock()
	// The results are new too: decide again from them.
	f.membersChanged()
	return rev, nil
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

// fleetWatch is one watch of the prefix, read by a goroutine of its own, so that the session's
// requests (a renewal waiting for its timeout) never delay what the watch delivers.
type fleetWatch struct {
	ctx     context.Context // its stream's: a progress request goes down the same stream
	cancel  context.CancelFunc
	started time.Time
	ended   atomic.Bool   // it failed or was closed: the next beat restarts it
	done    chan struct{} // closed when its reader has returned
}

// stop ends the watch and waits for its reader, so nothing it read lands after what follows.
func (w *fleetWatch) stop() {
	w.cancel()
	<-w.done
}

// follow has the lease renewed (renew) and, every beat, reads etcd's revision, asks the watch for
// its progress and writes what this replica publishes, until the lease is lost or ctx ends; the
// watch's reader applies it to the mirror. The view is current as of a read once the watch has
// delivered up to its revision (F-4: mark, reached). A watch that does not answer (a member that
// hangs with the connection open), ends, fails or was compacted away is restarted at a beat: the
// prefix listed again, then watched on a stream of its own, which the client sends to a member of
// its choice. The list is a linearizable read, so the view is current again whatever the old
// watch missed (etcd 3.4 may notify a watch's progress before delivering its events).
func (f *fleet) follow(ctx context.Context, lease clientv3.LeaseID, rev int64) error {
	n := 0
	w := f.watch(ctx, rev, n)
	defer func() { w.stop() }()
	restart := func() {
		w.stop()
		w.ended.Store(true) // until a list succeeds
		if rev, err := f.list(ctx); err == nil {
			n++
			w = f.watch(ctx, rev, n)
		}
	}
	lost := make(chan error, 1)
	rctx, stopRenewing := context.WithCancel(ctx)
	renewing := make(chan struct{})
	go func() {
		defer close(renewing)
		f.renew(rctx, lease, lost)
	}()
	defer func() {
		stopRenewing()
		<-renewing
	}()
	beat := time.NewTicker(fleetBeat)
	defer beat.Stop()
	if err := f.write(ctx, lease); err != nil {
		return err
	}
	limit := fleetBeat + f.cfg.Timeout
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-lost:
			return err
		case <-beat.C:
			f.mu.RLock()
			silent := f.now().Sub(f.heard) > limit
			f.mu.RUnlock()
			if w.ended.Load() || (silent && time.Since(w.started) > limit) {
				restart()
			}
			// A linearizable read says which revision etcd is at; the progress notification
			// that follows says whether the watch has delivered up to it (mark, reached).
			asked := f.now()
			c, cancel := f.timeout(ctx)
			resp, err := f.cli.Get(c, memberKey(f.cfg.Prefix, f.cfg.Replica), clientv3.WithCountOnly())
			cancel()
			if err == nil {
				f.mark(resp.Header.GetRevision(), asked)
			}
			c, cancel = context.WithTimeout(w.ctx, f.cfg.Timeout)
			_ = f.cli.RequestProgress(c)
			cancel()
			if !silent {
				f.checkAlarms(ctx)
			}
			if err := f.write(ctx, lease); err != nil {
				return err
			}
			f.assess()
		case <-f.kick:
			if err := f.write(ctx, lease); err != nil {
				return err
			}
		case done := <-f.handover:
			ok, err := f.reclaim(ctx, lease)
			done <- ok
			if err != nil {
				return err
			}
		}
	}
}

// renewEvery is how often a lease of ttl is renewed: every beat, and at least three times per
// TTL.
func renewEvery(ttl time.Duration) time.Duration { return min(fleetBeat, ttl/3) }

// renew renews lease until ctx ends, on a goroutine of its own: the session's loop waits for
// requests that may each take the whole timeout (a write, a list, a read sent to a member that
// hangs), several in one beat, and none of them may delay a renewal. Two renewals are never
// further apart than the renewal period plus the timeout, which the TTL exceeds (leaseTTL), so
// the lease is lost only when etcd does not answer it (F-1). A lease etcd no longer has is
// reported on lost, which ends the session.
func (f *fleet) renew(ctx context.Context, lease clientv3.LeaseID, lost chan<- error) {
	t := time.NewTicker(renewEvery(leaseTTL(f.cfg.Timeout)))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, cancel := f.timeout(ctx)
		_, err := f.cli.KeepAliveOnce(c, lease)
		cancel()
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			f.cErrors.Inc()
			lost <- fmt.Errorf("lease %x expired", int64(lease))
			return
		default:
			f.cErrors.Inc()
			f.noteErr(err)
		}
	}
}

// reclaim registers this replica again under lease, taking this process's member key over
// wherever it is (claim: no compare on a lease the key may no longer have), and writes every
// result this replica publishes again under lease: a membership of the same name leaves and will
// revoke its lease (takeOver). It reports whether everything was written; an error ends the
// session (a lost lease, or the name taken by another process).
func (f *fleet) reclaim(ctx context.Context, lease clientv3.LeaseID) (bool, error) {
	if err := f.claim(ctx, lease); err != nil {
		if errors.Is(err, errDuplicate) {
			return false, err
		}
		return false, nil // not answered: the session goes on, the leaving lease expires
	}
	f.mu.Lock()
	for k, v := range f.published {
		if _, want := f.want[k.pair][k.region]; !want {
			if _, handed := f.handed[k.pair][k.region]; !handed {
				// Withdrawn or forgotten: the write deletes it.
				f.dirty[k] = struct{}{}
				continue
			}
			if v == unknownValue {
				// Overwritten (the membership that leaves now wrote it after the hand-over) or
				// written without a reply: what etcd holds, as the watch showed it, or nothing
				// (the write deletes it) when it holds nothing this process wrote.
				held, ok := f.mirror.held(k, f.cfg.Replica, processNonce)
				if !ok {
					f.dirty[k] = struct{}{}
					continue
				}
				v = held
			}
			// Handed over (handOver) to the membership that leaves now without having taken it
			// over (its session never joined, or ended): this one publishes it again, with the
			// value it last held, until its next round of the target.
			if f.want[k.pair] == nil {
				f.want[k.pair] = make(map[string]tally)
			}
			f.want[k.pair][k.region] = v
		}
		f.dirty[k] = struct{}{}
		delete(f.published, k) // written again, under lease
	}
	for pair, w := range f.want {
		for region := range w {
			f.dirty[resultKey{pair: pair, region: region}] = struct{}{}
		}
	}
	clear(f.handed) // taken back
	f.mu.Unlock()
	if err := f.write(ctx, lease); err != nil {
		return false, err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.unwritten.IsZero(), nil
}

// watch watches the prefix from the revision after rev, on a gRPC stream of its own (number n),
// and starts its reader. WithRequireLeader: a member cut off from the cluster's leader ends the
// watch rather than keeping it open and silent. The client returns a watch only once etcd
// created it, so one that lands on a hung member is given up after the timeout (its channel is
// closed) rather than holding the session until gRPC's keepalive closes the connection.
func (f *fleet) watch(ctx context.Context, rev int64, n int) *fleetWatch {
	wctx, cancel := context.WithCancel(ctx)
	wctx = metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(wctx), "coresteer-watch", strconv.Itoa(n))
	giveUp := time.AfterFunc(f.cfg.Timeout, cancel)
	ch := f.cli.Watch(wctx, f.cfg.Prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1),
		clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
	giveUp.Stop()
	w := &fleetWatch{ctx: wctx, cancel: cancel, started: time.Now(), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer w.ended.Store(true) // closed: by etcd (no leader, say), or not created in time
		for wr := range ch {
			if err := wr.Err(); err != nil {
				// Failed (compacted away, canceled): the next beat lists again and restarts it.
				f.cErrors.Inc()
				f.noteErr(err)
				return
			}
			f.delivered(wr)
		}
	}()
	return w
}

// delivered applies one response of the watch. The watch has delivered everything up to the
// revision of its last event, not up to the response's header: a watch that is behind gets its
// events in batches, each stamped with etcd's current revision.
func (f *fleet) delivered(wr clientv3.WatchResponse) {
	f.apply(wr.Events)
	rev := wr.Header.GetRevision()
	if n := len(wr.Events); n > 0 {
		rev = wr.Events[n-1].Kv.GetModRevision() //nolint:protogetter // Event is clientv3's own type
	}
	f.reached(rev)
}

// mark records that etcd returned revision rev to a linearizable read asked at asked: once the
// watch has delivered everything up to rev, the view is current as of asked (F-4).
func (f *fleet) mark(rev int64, asked time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rev <= f.seen {
		f.current(asked)
		return
	}
	if len(f.marks) == maxMarks {
		f.marks = append(f.marks[:0], f.marks[1:]...)
	}
	f.marks = append(f.marks, revMark{rev: rev, asked: asked})
}

// reached records that the watch has delivered everything up to rev: the revision of its
// events, or of its progress notification or creation. Alone, that answer says only that the
// watch's member answers, not that it is current: a member that fell behind the cluster (a hung
// apply, a lost leader not noticed yet) answers a progress request at once with its own old
// revision, as a keepalive of the stream. The view is current only as of the latest
// linearizable read whose revision the watch has reached (mark).
func (f *fleet) reached(rev int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = max(f.seen, rev)
	f.settle()
}

// settle drops the marks the mirror has reached (seen), the view being current as of the latest
// of them. f.mu is held.
func (f *fleet) settle() {
	var asked time.Time
	n := 0
	for _, m := range f.marks {
		if m.rev <= f.seen {
			if m.asked.After(asked) {
				asked = m.asked
			}
			continue
		}
		f.marks[n] = m
		n++
	}
	f.marks = f.marks[:n]
	if !asked.IsZero() {
		f.current(asked)
	}
}

// current records that the view is current as of asked. After an outage the view is current
// again from now: the fleet decides again one interval later, once every member has published
// again (F-4). f.mu is held.
func (f *fleet) current(asked time.Time) {
	if !asked.After(f.heard) {
		return
	}
	if now := f.now(); now.Sub(f.heard) > fleetBeat+f.cfg.Timeout {
		f.since = now
	}
	f.heard = asked
}

func (f *fleet) noteErr(err error) {
	f.mu.Lock()
	f.lastErr = err
	f.mu.Unlock()
}

// checkAlarms asks etcd (the member the client picks, on its open connection) for its status:
// with an alarm (NOSPACE, CORRUPT), etcd refuses writes, so the others' results are frozen even
// when this replica has nothing to write (F-4). Only alarms count. etcd lists them among the
// status's errors, beside errors that are not alarms (a member without a leader, say): those are
// logged when they change, and the watch, which requires a leader, judges them. A member that
// does not answer says nothing: the watch judges reachability.
func (f *fleet) checkAlarms(ctx context.Context) {
	c, cancel := context.WithTimeout(ctx, min(f.cfg.Timeout, fleetBeat))
	st, err := pb.NewMaintenanceClient(f.cli.ActiveConnection()).Status(c, &pb.StatusRequest{})
	cancel()
	if err != nil {
		return
	}
	alarm, other := alarmsOf(st.GetErrors())
	f.mu.Lock()
	if f.alarm != "" && alarm == "" {
		f.since = f.now() // writes work again: every member publishes again first
	}
	f.alarm = alarm
	changed := other != f.statusErr
	f.statusErr = other
	f.mu.Unlock()
	if changed && other != "" {
		log.Warningf("Fleet %s (replica %s): etcd reports %s (not an alarm)", f.cfg.Prefix, f.cfg.Replica, other)
	}
}

// alarmsOf sorts the errors of etcd's status into its alarms, named by type and sorted (etcd
// writes each as an AlarmMember, one per member), and the other errors.
func alarmsOf(errs []string) (alarms, other string) {
	var as, rest []string
	for _, e := range errs {
		var a pb.AlarmMember
		if prototext.Unmarshal([]byte(e), &a) == nil && a.GetAlarm() != pb.AlarmType_NONE {
			if name := a.GetAlarm().String(); !slices.Contains(as, name) {
				as = append(as, name)
			}
			continue
		}
		if e = strings.TrimSpace(e); e != "" {
			rest = append(rest, e)
		}
	}
	slices.Sort(as)
	return strings.Join(as, " "), strings.Join(rest, "; ")
}

// assess exports whether this replica decides alone (fleet_fallback: not joined, the view
// stale, or within the interval after a join or an outage) and logs once when the view goes
// stale and once when it is fresh again (F-4).
func (f *fleet) assess() {
	f.mu.Lock()
	now := f.now()
	why := f.stale(now)
	enter := f.joined && why != "" && !f.outage
	leave := f.joined && why == "" && f.outage
	if enter || leave {
		f.outage = enter
	}
	_, shared := f.mode(f.warm())
	decides := shared && f.fallback
	f.setFallback(!shared)
	err := f.lastErr
	f.mu.Unlock()
	if decides {
		// The fleet decides from now on: its verdicts replace this replica's own now, not at
		// each target's next round, up to an interval later (F-3).
		for _, r := range f.registries() {
			r.refresh(f, nil)
		}
	}
	switch {
	case enter && strings.HasPrefix(why, "etcd unreachable"):
		log.Warningf("Fleet %s (replica %s): %s, probing and deciding alone: %v%s", f.cfg.Prefix, f.cfg.Replica, why, err, f.reach())
	case enter:
		log.Warningf("Fleet %s (replica %s): %s, probing and deciding alone: %v", f.cfg.Prefix, f.cfg.Replica, why, err)
	case leave:
		log.Infof("Fleet %s (replica %s): etcd answers again, rejoining; the fleet decides from the next interval", f.cfg.Prefix, f.cfg.Replica)
	}
}

// apply records watch events in the mirror and has the registries decide again what changed.
func (f *fleet) apply(evs []*clientv3.Event) {
	f.mu.Lock()
	members := false
	var pairs []pairKey
	for _, ev := range evs {
		var val []byte
		if ev.Type == clientv3.EventTypePut { //nolint:protogetter // Event is clientv3's own type
			val = ev.GetKv().GetValue()
		}
		c, err := f.mirror.apply(f.cfg.Prefix, string(ev.GetKv().GetKey()), val)
		if err != nil {
			log.Warningf("Fleet %s (replica %s): ignoring %v", f.cfg.Prefix, f.cfg.Replica, err)
			if !c.result {
				continue
			}
			// A result key now holding a bad value lost its result: decide its pair again, and
			// write this replica's own back.
		}
		members = members || c.members
		if c.replica == f.cfg.Replica {
			f.ownKey(ev, c)
			if k := (resultKey{pair: c.pair, region: c.region}); c.result {
				rev := ev.Kv.GetModRevision() //nolint:protogetter // Event is clientv3's own type
				if rev >= f.wroteAt[k] {
					// The last write's own event, or a later one: no older event of k can follow.
					delete(f.wroteAt, k)
				}
				if at, ok := f.inflight[k]; ok {
					f.inflight[k] = max(at, rev)
				}
			}
		}
		if c.member {
			continue
		}
		// This replica's own results too: its verdict reads them from etcd, as the others do.
		pairs = append(pairs, c.pair)
		if c.replica != f.cfg.Replica && err == nil {
			f.cReceived.Inc()
		}
	}
	if members {
		f.viewChanged()
	}
	f.mu.Unlock()
	switch {
	case members:
		f.membersChanged()
	case len(pairs) > 0:
		f.resultsChanged(pairs)
	}
}

// ownKey notes that this replica's member key or one of its published results was deleted, or
// written under another lease than this session's: another membership of this process had it, and
// that membership's lease went (a reload, its failure) or will go. The registration and the result
// are written again under this session's lease, so no key of this replica lives or dies with a
// lease it does not renew. f.mu is held.
func (f *fleet) ownKey(ev *clientv3.Event, c change) {
	if !f.joined {
		return
	}
	if ev.Type != clientv3.EventTypeDelete && clientv3.LeaseID(ev.Kv.GetLease()) == f.lease { //nolint:protogetter // Event is clientv3's own type
		return
	}
	if c.member {
		f.lostRegistration()
		return
	}
	k := resultKey{pair: c.pair, region: c.region}
	rev := ev.Kv.GetModRevision() //nolint:protogetter // Event is clientv3's own type
	if w, ok := f.wroteAt[k]; ok && rev <= w {
		return // older than this session's last write of k, whose reply was read
	}
	if _, ok := f.inflight[k]; ok {
		// The write's reply is not read yet: it tells whether the write came before or after.
		f.lostAt[k] = max(f.lostAt[k], rev)
	}
	f.lostResult(k, ev.Type == clientv3.EventTypeDelete) //nolint:protogetter // as above
}

// lostRegistration has the member key written again, whatever it held. f.mu is held.
func (f *fleet) lostRegistration() {
	f.regDue, f.regVal = true, ""
	f.poke()
}

// unknownValue is what published holds for a key of this replica's that etcd holds with another
// value or lease than this session wrote: a value no want equals, so the next write puts the
// wanted value again, or deletes the key when it is no longer wanted (a pending withdrawal).
var unknownValue = tally{ok: -1, got: -1}

// lostResult notes that one of this replica's published results was deleted (gone) or
// overwritten, so that the next write puts it back or withdraws it. f.mu is held.
func (f *fleet) lostResult(k resultKey, gone bool) {
	if _, had := f.published[k]; !had {
		return
	}
	if gone {
		delete(f.published, k)
	} else {
		f.published[k] = unknownValue
	}
	f.dirty[k] = struct{}{}
	f.poke()
}

// ownKeysListed does for a list what ownKey does for the watch's events: the keys of this
// replica that the list shows deleted, or holding another value or lease than this session wrote
// while the watch was down, are written again (or withdrawn). own are the replica's result keys
// as listed, memberLease the lease of its member key (0 when there is none). f.mu is held.
func (f *fleet) ownKeysListed(own map[resultKey]*mvccpb.KeyValue, memberLease int64) {
	if !f.joined {
		return // joining: what it writes next is under the new lease anyway
	}
	if clientv3.LeaseID(memberLease) != f.lease {
		f.lostRegistration()
	}
	for k, v := range f.published {
		kv, ok := own[k]
		switch {
		case !ok:
			f.lostResult(k, true)
		case clientv3.LeaseID(kv.GetLease()) != f.lease || string(kv.GetValue()) != encodeResult(v):
			f.lostResult(k, false)
		}
	}
}

// write sends the registration when it changed and the results that changed, in transactions
// of at most fleetMaxOps operations, all under lease. A failed write stays due and is retried at
// the next beat; past the timeout it makes the view stale (F-4). A member key that is not under
// this session's lease is registered again (claim); a lost lease, or the name taken by another
// process, ends the session. A superseded membership writes nothing.
func (f *fleet) write(ctx context.Context, lease clientv3.LeaseID) error {
	if f.superseded.Load() {
		return nil
	}
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
			return f.writeFailed(err)
		}
		if !resp.Succeeded {
			// The key is not under this session's lease: another membership of this process had
			// it, and its revocation or expiry may have deleted it. Register as when joining,
			// which takes this process's key over wherever it is: a compare on this lease would
			// fail for ever.
			if err := f.claim(ctx, lease); err != nil {
				if errors.Is(err, errDuplicate) || errors.Is(err, errSuperseded) {
					return err
				}
				f.mu.Lock()
				f.regDue = true
				f.mu.Unlock()
				return f.writeFailed(err)
			}
		}
		f.mu.Lock()
		f.regVal = val
		f.mu.Unlock()
	}
	for {
		f.mu.Lock()
		ops := make([]clientv3.Op, 0, min(len(f.dirty), fleetMaxOps))
		keys := make([]resultKey, 0, cap(ops))
		vals := make([]tally, 0, cap(ops))
		for k := range f.dirty {
			if len(ops) == fleetMaxOps {
				break
			}
			delete(f.dirty, k)
			v, want := f.want[k.pair][k.region]
			pv, had := f.published[k]
			switch {
			case want && (!had || pv != v):
				ops = append(ops, clientv3.OpPut(k.key(f.cfg.Prefix, f.cfg.Replica), encodeResult(v), clientv3.WithLease(lease)))
			case !want && had:
				ops = append(ops, clientv3.OpDelete(k.key(f.cfg.Prefix, f.cfg.Replica)))
			default:
				continue
			}
			keys = append(keys, k)
			vals = append(vals, v)
			f.inflight[k] = 0
		}
		f.mu.Unlock()
		if len(ops) == 0 {
			f.wrote()
			return nil
		}
		c, cancel := f.timeout(ctx)
		resp, err := f.cli.Txn(c).Then(ops...).Commit()
		cancel()
		f.mu.Lock()
		if err != nil {
			for _, k := range keys {
				delete(f.inflight, k)
				delete(f.lostAt, k)
				f.dirty[k] = struct{}{}
				// etcd may have applied it and only the reply been lost: what the key holds is
				// not known, so the next write puts the wanted value, or deletes a withdrawn one.
				f.published[k] = unknownValue
			}
			f.mu.Unlock()
			return f.writeFailed(err)
		}
		for i, k := range keys {
			event := f.inflight[k]
			delete(f.inflight, k)
			lost, ok := f.lostAt[k]
			delete(f.lostAt, k)
			if ok && lost > resp.Header.GetRevision() {
				// Deleted or overwritten after this write, and seen by the watch before its
				// reply: the write did not stick.
				f.published[k] = unknownValue
				f.dirty[k] = struct{}{}
				f.poke()
				continue
			}
			if event < resp.Header.GetRevision() {
				f.wroteAt[k] = resp.Header.GetRevision() // until the watch delivers this write's event
			}
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

// writeFailed counts a failed write and notes since when writes fail; only a lost lease ends
// the session.
func (f *fleet) writeFailed(err error) error {
	f.cErrors.Inc()
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("lease expired: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unwritten.IsZero() {
		f.unwritten = f.now()
	}
	f.lastErr = err
	return nil
}

// wrote notes that nothing due is left unwritten. After writes failed past the timeout, the
// view is current again from now (F-4).
func (f *fleet) wrote() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unwritten.IsZero() {
		return
	}
	if now := f.now(); now.Sub(f.unwritten) > fleetBeat+f.cfg.Timeout {
		f.since = now
	}
	f.unwritten = time.Time{}
}
