package etcdstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/homelab-migrate/migrate/state"
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
	ttl := int64((s.cfg.lockTTL() + time.Second - 1) / time.Second)
	rctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout())
	defer cancel()
	grant, err := s.cli.Grant(rctx, ttl)
	if err != nil {
		return s.requestErr("taking the lock (lease grant)", err)
	}
	s.lease = grant.ID
	info, _ := json.Marshal(s.lockInfo)
	key := s.prefix + keyLock
	resp, err := s.cli.Txn(rctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(info), clientv3.WithLease(s.lease))).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		// Settle it: the key is ours if it is bound to our lease.
		if g, gerr := s.cli.Get(rctx, key); gerr == nil && len(g.Kvs) > 0 && clientv3.LeaseID(g.Kvs[0].Lease) == s.lease {
			resp, err = &clientv3.TxnResponse{Succeeded: true}, nil
		}
	}
	if err != nil || !resp.Succeeded {
		s.revoke()
		s.lease = 0
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
	kctx, stop := context.WithCancel(context.Background())
	ch, err := s.cli.KeepAlive(kctx, s.lease)
	if err != nil {
		stop()
		s.revoke()
		return s.requestErr("keeping the lock alive", err)
	}
	s.kaStop, s.kaDone = stop, make(chan struct{})
	go func() {
		defer close(s.kaDone)
		for range ch {
		}
		if kctx.Err() == nil {
			s.markLost(fmt.Sprintf("its lease (TTL %v) was not renewed in time, or was revoked", s.cfg.lockTTL()))
		}
	}()
	return nil
}

// release stops the keepalive and revokes the lease, deleting the lock.
func (s *Store) release() error {
	if s.kaStop != nil {
		s.kaStop()
		<-s.kaDone
	}
	if s.lease == 0 {
		return nil
	}
	return s.revoke()
}

func (s *Store) revoke() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.requestTimeout())
	defer cancel()
	_, err := s.cli.Revoke(ctx, s.lease)
	s.mu.Lock()
	lost := s.lost != nil
	s.mu.Unlock()
	if err != nil && !lost {
		return s.requestErr("releasing the lock (it is released when its lease expires)", err)
	}
	return nil
}

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
