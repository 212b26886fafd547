package etcdstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/homelab-migrate/migrate/state"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The lock is the key "lock", holding the holder's LockInfo, bound to a
// lease of LockTTL that the holder keeps alive while it runs. A holder
// that dies stops renewing it, and etcd deletes the key when the lease
// expires: the next writer, on any machine, gets the lock then.

// acquire takes the lock or fails at once with a *state.LockedError.
func (s *Store) acquire(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout())
	defer cancel()
	lease, err := s.grant(rctx)
	if err != nil {
		return s.requestErr("taking the lock (lease grant)", err)
	}
	key := s.prefix + keyLock
	resp, err := s.cli.Txn(rctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(s.lockPut(lease)).
		Else(clientv3.OpGet(key)).Commit()
	var rev int64 // the lock's revision
	if err == nil {
		rev = resp.Header.Revision
	} else {
		// Settle it: the key is ours if it is bound to our lease.
		if g, gerr := s.cli.Get(rctx, key); gerr == nil && len(g.Kvs) > 0 && clientv3.LeaseID(g.Kvs[0].Lease) == lease {
			resp, err, rev = &clientv3.TxnResponse{Succeeded: true}, nil, g.Kvs[0].ModRevision
		}
	}
	if err != nil || !resp.Succeeded {
		s.revokeLease(lease)
		if err != nil {
			return s.requestErr("taking the lock", err)
		}
		le := &state.LockedError{Path: s.cfg.where() + " key " + key}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			if h, err := state.ParseLockInfo(kvs[0].Value); err != nil {
				le.ReadErr = err
			} else {
				le.Holder = *h
			}
		}
		return le
	}
	s.lease.Store(int64(lease))
	kctx, stop := context.WithCancel(context.Background())
	w, err := s.keep(kctx, lease, rev)
	if err != nil {
		stop()
		s.revokeLease(lease)
		return s.requestErr("keeping the lock alive", err)
	}
	s.kaStop, s.kaDone = stop, make(chan struct{})
	go s.supervise(kctx, w)
	return nil
}

// grant asks for a lease of the lock's TTL.
func (s *Store) grant(ctx context.Context) (clientv3.LeaseID, error) {
	ttl := int64((s.cfg.lockTTL() + time.Second - 1) / time.Second)
	grant, err := s.cli.Grant(ctx, ttl)
	if err != nil {
		return 0, err
	}
	return grant.ID, nil
}

// lockPut writes the lock key, holding this holder's LockInfo, bound to
// lease.
func (s *Store) lockPut(lease clientv3.LeaseID) clientv3.Op {
	info, _ := json.Marshal(s.lockInfo)
	return clientv3.OpPut(s.prefix+keyLock, string(info), clientv3.WithLease(lease))
}

// watched is what tells a holder its lock is gone: the lease's keepalive
// answers ending (the lease expired, was revoked, or was not renewed in
// time) and the lock key changing (deleted, or bound to another lease)
// after the revision it was taken at.
type watched struct {
	lease     clientv3.LeaseID
	keepalive <-chan *clientv3.LeaseKeepAliveResponse
	key       clientv3.WatchChan
}

// keep starts keeping lease alive and watching the lock key from rev on.
func (s *Store) keep(ctx context.Context, lease clientv3.LeaseID, rev int64) (watched, error) {
	ka, err := s.cli.KeepAlive(ctx, lease)
	if err != nil {
		return watched{}, err
	}
	key := s.cli.Watch(ctx, s.prefix+keyLock, clientv3.WithRev(rev+1))
	return watched{lease: lease, keepalive: ka, key: key}, nil
}

// supervise keeps the lock until the Store releases it (ctx). When it is
// lost, the Store says so at once (Lost), and the lock is taken again if
// nobody took it and nothing was written since: a lease revoked or
// expired while this holder could not renew it (a laptop asleep) leaves
// its state as it was, and the running steps, cut off, can still be
// recorded as such.
func (s *Store) supervise(ctx context.Context, w watched) {
	defer close(s.kaDone)
	for {
		why := s.watch(ctx, w)
		if ctx.Err() != nil {
			return
		}
		// Writes wait for the lock to be taken again rather than fail.
		s.mu.Lock()
		s.reclaiming = true
		s.mu.Unlock()
		s.markLost(why)
		next, ok := s.reclaim(ctx, w.lease)
		if !ok {
			return
		}
		w = next
	}
}

// watch returns why the lock of w is lost, or "" once ctx ends.
func (s *Store) watch(ctx context.Context, w watched) string {
	expired := fmt.Sprintf("its lease (TTL %v) was revoked, or was not renewed in time (was this machine asleep, or the cluster without a quorum?)", s.cfg.lockTTL())
	for {
		select {
		case <-ctx.Done():
			return ""
		case _, ok := <-w.keepalive:
			if !ok {
				return expired
			}
		case wr, ok := <-w.key:
			if !ok {
				w.key = nil // the watch ended (ctx, compaction): the keepalive still tells
				continue
			}
			for _, ev := range wr.Events {
				switch {
				case ev.Type == clientv3.EventTypeDelete:
					return "the lock was removed: its lease was revoked (migrate state unlock) or expired, or the key deleted"
				case clientv3.LeaseID(ev.Kv.Lease) != w.lease:
					return "another process took the lock"
				}
			}
		}
	}
}

// reclaim takes the lock again under a new lease, only if nobody holds it
// and the state's head is still the one this holder last wrote. Writes
// wait meanwhile; they fail with the loss if it was not taken again.
func (s *Store) reclaim(ctx context.Context, old clientv3.LeaseID) (w watched, ok bool) {
	defer func() {
		s.mu.Lock()
		s.reclaiming = false
		if ok {
			s.lost = nil
		}
		s.cond.Broadcast()
		s.mu.Unlock()
	}()
	s.mu.Lock()
	headRev := s.headRev
	s.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout())
	defer cancel()
	lease, err := s.grant(rctx)
	if err != nil {
		return watched{}, false
	}
	key := s.prefix + keyLock
	resp, err := s.cli.Txn(rctx).If(
		clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
		clientv3.Compare(clientv3.ModRevision(s.prefix+keyHead), "=", headRev),
	).Then(s.lockPut(lease)).Commit()
	if err == nil && resp.Succeeded {
		if w, err = s.keep(ctx, lease, resp.Header.Revision); err == nil {
			s.lease.Store(int64(lease))
			// The old lease, if it still lives, proves nothing now.
			s.revokeLease(old)
			return w, true
		}
	}
	s.revokeLease(lease)
	return watched{}, false
}

// Lost is closed once the lock is lost: the holder must stop what it
// does at once. LostCause says why.
func (s *Store) Lost() <-chan struct{} { return s.lostCh }

// LostCause is why the lock was lost (ErrLockLost), nil while it never
// was; it stays after the lock was taken again to record the steps cut
// off.
func (s *Store) LostCause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lostWhy
}

// release stops the keepalive and revokes the lease, deleting the lock.
func (s *Store) release() error {
	if s.kaStop != nil {
		s.kaStop()
		<-s.kaDone
	}
	lease := s.leaseID()
	if lease == 0 {
		return nil
	}
	err := s.revokeLease(lease)
	s.mu.Lock()
	lost := s.lost != nil
	s.mu.Unlock()
	if err != nil && !lost {
		return s.requestErr("releasing the lock (it is released when its lease expires)", err)
	}
	return nil
}

// revokeLease revokes lease, deleting the keys bound to it.
func (s *Store) revokeLease(lease clientv3.LeaseID) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.requestTimeout())
	defer cancel()
	_, err := s.cli.Revoke(ctx, lease)
	return err
}

// leaseID is the lease the lock is bound to; 0 for a read-only Store.
func (s *Store) leaseID() clientv3.LeaseID { return clientv3.LeaseID(s.lease.Load()) }

// ReadLock returns the holder of the lock, or nil, nil when nobody holds
// it.
func ReadLock(ctx context.Context, cfg Config) (*state.LockInfo, error) {
	cli, err := cfg.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	rctx, cancel := context.WithTimeout(ctx, cfg.requestTimeout())
	defer cancel()
	resp, err := cli.Get(rctx, cfg.prefix()+keyLock)
	if err != nil {
		return nil, fmt.Errorf("%s: reading the lock: %w", cfg.where(), err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	info, err := state.ParseLockInfo(resp.Kvs[0].Value)
	if err != nil {
		return nil, fmt.Errorf("%s key %slock: %w", cfg.where(), cfg.prefix(), err)
	}
	return info, nil
}

// Unlock removes the lock if its holder's ID is id. A holder that is still
// running finds out at its next write (ErrLockLost) and stops.
func Unlock(ctx context.Context, cfg Config, id string) error {
	cli, err := cfg.connect(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	rctx, cancel := context.WithTimeout(ctx, cfg.requestTimeout())
	defer cancel()
	key := cfg.prefix() + keyLock
	resp, err := cli.Get(rctx, key)
	if err != nil {
		return fmt.Errorf("%s: reading the lock: %w", cfg.where(), err)
	}
	if len(resp.Kvs) == 0 {
		return fmt.Errorf("the state at %s is not locked", cfg.where())
	}
	kv := resp.Kvs[0]
	info, _ := state.ParseLockInfo(kv.Value)
	if info == nil || info.ID != id {
		held := "no lock ID"
		if info != nil {
			held = "lock ID " + info.ID
		}
		return fmt.Errorf("lock ID %q does not match the lock on the state at %s (%s): nothing unlocked", id, cfg.where(), held)
	}
	// Only the lock that was read, not one taken meanwhile.
	tr, err := cli.Txn(rctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
		Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return fmt.Errorf("%s: removing the lock: %w", cfg.where(), err)
	}
	if !tr.Succeeded {
		return nil // released meanwhile
	}
	if kv.Lease != 0 {
		cli.Revoke(rctx, clientv3.LeaseID(kv.Lease)) // its keepalive ends too
	}
	return nil
}

func isDeadline(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	s, ok := status.FromError(err)
	return ok && (s.Code() == codes.DeadlineExceeded || s.Code() == codes.Unavailable)
}

var _ state.HolderChecker = (*Store)(nil)

// RunningElsewhere refuses a step recorded running (or reverting) under
// another holder's lease while that lease lives, or while whether it
// lives cannot be read: that holder may be at it still. A lease gone
// (expired, revoked) proves its holder stopped. A record without a lease
// (written by an older migrate, or pushed from local files) is left to
// the in-flight read, as before.
func (s *Store) RunningElsewhere(ctx context.Context, rec *state.StepRecord) error {
	h := rec.Holder
	if h == nil || h.Lease == 0 || s.lockInfo == nil || clientv3.LeaseID(h.Lease) == s.leaseID() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout())
	defer cancel()
	ttl, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(h.Lease))
	switch {
	case err == nil && ttl.TTL < 0, errors.Is(err, rpctypes.ErrLeaseNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("%s may still be running elsewhere: %s started it, and whether its lease %x still lives could not be read (%v); "+
			"nothing was done to it: run again once the cluster answers", rec.Addr, holderText(h), h.Lease, s.requestErr("reading the lease", err))
	}
	return fmt.Errorf("%s may still be running elsewhere: %s started it, and its lease %x still lives (it ends %v after that process stops renewing it); "+
		"nothing was done to it: wait for that run to end, or stop it, then run again: the next run reads what it left",
		rec.Addr, holderText(h), h.Lease, s.cfg.lockTTL())
}

// holderText names a holder for messages.
func holderText(h *state.Holder) string {
	return fmt.Sprintf("pid %d (%s@%s, lock ID %s)", h.PID, h.User, h.Host, h.LockID)
}
