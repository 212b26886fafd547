package etcdstate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var rpctypesErrCompacted = rpctypes.ErrCompacted

// ErrLockLost is what Checkpoint, Record and Persist return once the lock's
// lease is lost: the engine then stops starting steps.
var ErrLockLost = errors.New("state lock lost")

// Store is the state under one prefix of an etcd cluster. It implements
// state.Manager and is safe for concurrent use.
type Store struct {
	cfg      Config
	prefix   string
	opts     state.Options
	cli      *clientv3.Client // nil once a read-only Store has loaded
	lockInfo *state.LockInfo
	// lease is the lease the lock is bound to (leaseID); 0 when
	// read-only. It changes when the lock is taken again (reclaim).
	lease  atomic.Int64
	kaStop context.CancelFunc
	kaDone chan struct{}
	// lostCh is closed when the lock is first lost.
	lostCh chan struct{}

	mu   sync.Mutex
	cond sync.Cond
	snap *state.Snapshot // confirmed writes only
	gen  string
	// headRev is head's ModRevision as this holder last wrote it: every
	// write compares it.
	headRev    int64
	journal    int // entries since the snapshot
	open       *batch
	flushing   bool
	persisting int
	snapping   bool // a Persist, Import or Close is writing
	// unsure is a write whose outcome is not known yet: settled before
	// any other write.
	unsure *pending
	// lost is why writes are refused: the lock is lost. lostWhy is the
	// first loss, kept after the lock is taken again; reclaiming: writes
	// wait while the lock may be taken again.
	lost, lostWhy error
	reclaiming    bool
	closed        bool
	txns          uint64 // journal transactions committed (tests, benchmarks)
}

// pending is a write whose outcome is unknown: it was committed if probe
// holds val; apply (with s.mu held) then records it.
type pending struct {
	probe string
	val   []byte
	apply func(rev int64)
}

type batch struct {
	recs  []*state.StepRecord
	steps [][]byte // their JSON
	bytes int
	last  uint64
	probe string // the last entry's key, and its value
	val   []byte
	done  bool
	err   error
}

var _ state.Manager = (*Store)(nil)

// Open opens the state under cfg.Prefix. With opts.Lock it takes the lock
// (failing at once with a *state.LockedError naming the holder), creates a
// new state if there is none, and folds the journal into a new snapshot;
// without, it reads the state and takes no lock.
func Open(ctx context.Context, cfg Config, opts state.Options) (*Store, error) {
	cli, err := cfg.connect(ctx)
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, prefix: cfg.prefix(), opts: opts, cli: cli}
	s.cond.L = &s.mu
	if opts.Lock == nil {
		defer func() { s.cli = nil; cli.Close() }()
		l, err := s.read(ctx)
		if err != nil {
			return nil, err
		}
		s.snap = l.snap
		if s.snap == nil {
			s.snap = &state.Snapshot{Version: state.CurrentVersion, Steps: map[string]*state.StepRecord{}}
		}
		return s, nil
	}
	info := *opts.Lock
	state.FillLockInfo(&info)
	s.lockInfo = &info
	s.lostCh = make(chan struct{})
	if err := s.acquire(ctx); err != nil {
		cli.Close()
		return nil, err
	}
	if err := s.load(ctx); err != nil {
		s.release()
		cli.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) load(ctx context.Context) error {
	l, err := s.read(ctx)
	if err != nil {
		return err
	}
	s.headRev, s.journal = l.headRev, l.journal
	for _, gen := range l.orphans {
		// Chunks of a Persist cut short; nobody reads them.
		if _, err := s.guarded(ctx, clientv3.OpDelete(s.prefix+snapDir+gen+"/", clientv3.WithPrefix())); err != nil {
			return err
		}
	}
	if l.snap == nil {
		s.snap = &state.Snapshot{Version: state.CurrentVersion, Lineage: state.NewLineage(), Steps: map[string]*state.StepRecord{}}
		s.journal = 1 // written now
	} else {
		s.snap, s.gen = l.snap, l.gen
		if l.version < state.CurrentVersion && s.journal == 0 {
			s.journal = 1 // an older format: written in the current one now
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.persistLocked()
}

// Lineage is the state's random identifier; "" for a read-only Store of a
// state that does not exist yet.
func (s *Store) Lineage() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap.Lineage
}

// LockInfo returns the lock this Store holds, nil when read-only.
func (s *Store) LockInfo() *state.LockInfo {
	if s.lockInfo == nil {
		return nil
	}
	c := *s.lockInfo
	return &c
}

// Snapshot returns a deep copy of the state, every checkpoint included.
func (s *Store) Snapshot() *state.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap.Clone()
}

// Step returns a copy of the record of addr.
func (s *Store) Step(addr phases.Address) (*state.StepRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.snap.Steps[addr.String()]
	if !ok {
		return nil, false
	}
	return r.Clone(), true
}

// Checkpoint writes rec as a journal entry and returns once etcd has
// committed it (a majority of members have it on disk).
func (s *Store) Checkpoint(rec *state.StepRecord) error { return s.append(rec) }

// Record is Checkpoint: an etcd commit is durable already.
func (s *Store) CheckpointUnsynced(rec *state.StepRecord) error { return s.append(rec) }

func (s *Store) append(rec *state.StepRecord) error {
	if s.lockInfo == nil {
		return state.ErrReadOnly
	}
	// A step started names this holder and its lease: another holder
	// that finds it running asks whether the lease still lives.
	c, step, err := state.PrepareRecord(rec.Stamped(state.HolderOf(s.lockInfo, int64(s.leaseID()))))
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.closed {
			return state.ErrClosed
		}
		if s.lost != nil && !s.reclaiming {
			return s.lost
		}
		// Wait while Persist runs, the lock may be taken again, or for
		// room in the open batch.
		if s.persisting > 0 || s.reclaiming || (s.open != nil && !s.open.fits(len(step))) {
			s.cond.Wait()
			continue
		}
		break
	}
	// Sequence numbers are given when the batch is written, after the
	// last confirmed one.
	entry := len(step) + 200
	if entry > maxTxnBytes {
		return fmt.Errorf("checkpoint %s: the record is %d bytes, over the %d an etcd request may carry", rec.Addr, len(step), maxTxnBytes)
	}
	b := s.open
	if b == nil {
		b = &batch{}
		s.open = b
	}
	b.steps = append(b.steps, step)
	b.bytes += entry
	b.recs = append(b.recs, c)
	for !b.done {
		if !s.flushing && s.open == b {
			s.flush(b)
		} else {
			s.cond.Wait()
		}
	}
	return b.err
}

func (b *batch) fits(n int) bool {
	return len(b.recs) == 0 || (len(b.recs) < maxTxnOps && b.bytes+n <= maxTxnBytes)
}

// flush commits b, with s.mu held on entry and exit (not during the
// request, so the next batch gathers meanwhile).
func (s *Store) flush(b *batch) {
	s.flushing, s.open = true, nil
	s.cond.Broadcast()
	err := s.settleLocked()
	var rev int64
	for try := 0; err == nil; try++ {
		var ops []clientv3.Op
		now := time.Now()
		for i, step := range b.steps {
			seq := s.snap.Serial + uint64(i) + 1
			b.probe, b.val = s.prefix+journalKey(seq), state.EncodeEntry(seq, s.snap.Lineage, now, step)
			ops = append(ops, clientv3.OpPut(b.probe, string(b.val)))
		}
		b.last = s.snap.Serial + uint64(len(b.steps))
		ops = append(ops, s.headOp(b.last))
		s.mu.Unlock()
		rev, err = s.commit(fmt.Sprintf("checkpoint %s", b.recs[len(b.recs)-1].Addr), ops, b.probe, b.val)
		s.mu.Lock()
		if !errors.Is(err, errStale) || try == 2 {
			break
		}
		err = s.resyncLocked()
	}
	s.flushing = false
	s.txns++
	if err == nil {
		s.applyLocked(b, rev)
	} else {
		if errors.Is(err, errUnsure) {
			s.unsure = &pending{b.probe, b.val, func(rev int64) { s.applyLocked(b, rev) }}
		}
	}
	b.done, b.err = true, err
	s.cond.Broadcast()
}

func (s *Store) applyLocked(b *batch, rev int64) {
	for _, r := range b.recs {
		s.snap.Apply(r)
	}
	s.snap.Serial = b.last
	s.headRev = rev
	s.journal += len(b.recs)
}

// settleLocked finds out whether an earlier write whose outcome was
// unknown was committed (with s.mu held; it is released while reading).
func (s *Store) settleLocked() error {
	p := s.unsure
	if p == nil {
		return nil
	}
	s.mu.Unlock()
	applied, rev, err := s.check(context.Background(), p.probe, p.val)
	s.mu.Lock()
	if errors.Is(err, errStale) {
		// Committed, then written over by a later try of this holder:
		// what etcd holds is the truth.
		if err = s.resyncLocked(); err == nil {
			s.unsure = nil
		}
		return err
	}
	if err != nil {
		return err
	}
	s.unsure = nil
	if applied {
		p.apply(rev)
	}
	return nil
}

func (s *Store) headOp(serial uint64) clientv3.Op {
	h, _ := json.Marshal(head{Serial: serial, Lineage: s.snap.Lineage})
	return clientv3.OpPut(s.prefix+keyHead, string(h))
}

// errStale: the state changed since this holder read it, while the lock
// is still its own (a write given up on was committed later).
var errStale = errors.New("the state changed under this holder (a write it gave up on was committed later): read it again")

// resyncLocked reads the state again after errStale (s.mu held, released
// while reading).
func (s *Store) resyncLocked() error {
	s.mu.Unlock()
	l, err := s.read(context.Background())
	s.mu.Lock()
	if err != nil {
		return err
	}
	if l.snap == nil || l.snap.Lineage != s.snap.Lineage {
		return s.unusable(keyMeta, errors.New("the state this holder wrote is gone"), "")
	}
	s.snap, s.gen, s.headRev, s.journal = l.snap, l.gen, l.headRev, l.journal
	return nil
}

// errUnsure marks a write whose outcome is not known.
var errUnsure = errors.New("etcd did not confirm the write")

// commit runs ops in one transaction guarded by the lock and head, and
// returns the revision it committed at. A request that fails without an
// answer is settled by reading probe (a key the transaction writes, with
// val): committed, not committed (then tried again while time remains),
// or unknown (an error wrapping errUnsure).
func (s *Store) commit(what string, ops []clientv3.Op, probe string, val []byte) (int64, error) {
	deadline := time.Now().Add(s.cfg.requestTimeout())
	for {
		ctx, cancel := s.attempt(context.Background(), deadline)
		resp, err := s.cli.Txn(ctx).If(s.lockCmp(), clientv3.Compare(clientv3.ModRevision(s.prefix+keyHead), "=", s.headRev)).
			Then(ops...).Commit()
		cancel()
		if err == nil {
			if resp.Succeeded {
				return resp.Header.Revision, nil
			}
			// Refused: perhaps because an earlier try was committed.
			applied, rev, cerr := s.check(context.Background(), probe, val)
			switch {
			case applied:
				return rev, nil
			case cerr == nil:
				cerr = s.refused()
			}
			return 0, fmt.Errorf("%s: %w", what, cerr)
		}
		if !maybeApplied(err) {
			return 0, fmt.Errorf("%s: %w", what, s.requestErr("writing", err))
		}
		applied, rev, cerr := s.check(context.Background(), probe, val)
		switch {
		case errors.Is(cerr, errStale) || errors.Is(cerr, ErrLockLost):
			return 0, fmt.Errorf("%s: %w", what, cerr)
		case cerr != nil:
			return 0, fmt.Errorf("%s: %w: %v (the next write finds out whether it was committed)", what, errUnsure, s.requestErr("writing", err))
		case applied:
			return rev, nil
		case time.Now().After(deadline):
			// Not committed yet, but it could still be.
			return 0, fmt.Errorf("%s: %w: %v (the next write finds out whether it was committed)", what, errUnsure, s.requestErr("writing", err))
		}
	}
}

// attempt bounds one try of a write: a proposal lost with a leader that
// died waits out the server's timeout (7s) otherwise, while its outcome
// can be read back and the write tried again at once.
func (s *Store) attempt(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(ctx, minTime(deadline, time.Now().Add(max(s.cfg.requestTimeout()/4, time.Second))))
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// maybeApplied says whether a failed request may have been committed.
func maybeApplied(err error) bool {
	for _, definite := range []error{rpctypes.ErrTooManyOps, rpctypes.ErrRequestTooLarge, rpctypes.ErrPermissionDenied,
		rpctypes.ErrAuthFailed, rpctypes.ErrUserEmpty, rpctypes.ErrKeyNotFound, rpctypes.ErrLeaseNotFound} {
		if errors.Is(err, definite) {
			return false
		}
	}
	return true
}

// check reads head and probe: the write is committed if probe holds val
// at head's revision, not committed if head is the one this holder wrote
// last. Anything else means another writer: the lock is lost.
func (s *Store) check(ctx context.Context, probe string, val []byte) (bool, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout())
	defer cancel()
	var resp *clientv3.TxnResponse
	var err error
	for {
		// A leader election, a member going away: try again while time
		// remains.
		resp, err = s.cli.Txn(ctx).Then(clientv3.OpGet(s.prefix+keyHead), clientv3.OpGet(probe)).Commit()
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return false, 0, s.requestErr("reading back a write", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	hk, pk := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	var headRev int64
	if len(hk) > 0 {
		headRev = hk[0].ModRevision
	}
	s.mu.Lock()
	mine := s.headRev
	s.mu.Unlock()
	switch {
	case headRev == mine:
		return false, 0, nil
	case len(pk) > 0 && bytes.Equal(pk[0].Value, val) && pk[0].ModRevision == headRev:
		return true, headRev, nil
	}
	return false, 0, s.refused()
}

func (s *Store) lockCmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.LeaseValue(s.prefix+keyLock), "=", s.leaseID())
}

// refused says why a guarded transaction failed, and marks the lock lost.
func (s *Store) refused() error {
	why := "a write was refused and the lock could not be read back"
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.requestTimeout())
	defer cancel()
	if resp, err := s.cli.Get(ctx, s.prefix+keyLock); err == nil {
		switch {
		case len(resp.Kvs) > 0 && clientv3.LeaseID(resp.Kvs[0].Lease) == s.leaseID():
			// Only this holder writes, so the change is its own: an
			// earlier try that etcd committed after it was given up.
			return errStale
		case len(resp.Kvs) == 0:
			why = "the lock's lease expired or the lock was removed (migrate state unlock)"
		case clientv3.LeaseID(resp.Kvs[0].Lease) != s.leaseID():
			why = "the lock's lease expired and another process took the lock"
			if h, err := state.ParseLockInfo(resp.Kvs[0].Value); err == nil {
				why += fmt.Sprintf(": pid %d (%s@%s) running %q", h.PID, h.User, h.Host, h.Command)
			}
		}
	}
	return s.markLost(why)
}

func (s *Store) markLost(why string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost == nil {
		s.lost = fmt.Errorf("%w (%s): %s; no step may start: run again once the cause is fixed", ErrLockLost, s.cfg.where(), why)
		if s.lostWhy == nil {
			s.lostWhy = s.lost
			close(s.lostCh)
		}
		s.cond.Broadcast()
	}
	return s.lost
}

// requestErr names the endpoints and says what a timeout likely means.
func (s *Store) requestErr(doing string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rpctypes.ErrTimeout) || errors.Is(err, rpctypes.ErrNoLeader) ||
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) || errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost) || isDeadline(err) {
		return fmt.Errorf("%s: %s: no answer within %v: is a majority of the cluster up (no quorum)? %v", s.cfg.where(), doing, s.cfg.requestTimeout(), err)
	}
	return fmt.Errorf("%s: %s: %v", s.cfg.where(), doing, err)
}

// guarded runs ops under the lock only (idempotent writes: chunks of a new
// generation, removal of orphans), trying again while time remains.
func (s *Store) guarded(ctx context.Context, ops ...clientv3.Op) (int64, error) {
	deadline := time.Now().Add(s.cfg.requestTimeout())
	for {
		tctx, cancel := s.attempt(ctx, deadline)
		resp, err := s.cli.Txn(tctx).If(s.lockCmp()).Then(ops...).Commit()
		cancel()
		switch {
		case err == nil && resp.Succeeded:
			return resp.Header.Revision, nil
		case err == nil:
			return 0, s.refused()
		case !maybeApplied(err) || time.Now().After(deadline):
			return 0, s.requestErr("writing", err)
		}
	}
}

// Persist folds the journal into a new snapshot: the chunks of a new
// generation are written, then one transaction switches snapshot/meta to
// it, empties the journal and deletes the old generation.
func (s *Store) Persist() error {
	if s.lockInfo == nil {
		return state.ErrReadOnly
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return state.ErrClosed
	}
	defer s.waitIdle()()
	return s.persistLocked()
}

// waitIdle waits, with s.mu held, until no checkpoint is being written,
// and holds new ones back until the returned func is called (s.mu held;
// the persist that follows releases s.mu during its requests).
func (s *Store) waitIdle() func() {
	s.persisting++
	for s.flushing || s.open != nil || s.snapping {
		s.cond.Wait()
	}
	s.snapping = true
	return func() { s.snapping = false; s.persisting--; s.cond.Broadcast() }
}

func (s *Store) persistLocked() error {
	for s.reclaiming {
		s.cond.Wait()
	}
	if s.lost != nil {
		return s.lost
	}
	if err := s.settleLocked(); err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	if s.journal == 0 {
		return nil
	}
	snap := s.snap.Clone()
	if s.opts.MigrateVersion != "" {
		snap.MigrateVersion = s.opts.MigrateVersion
	}
	return s.writeSnapshot(snap, func(rev int64, gen string) {
		s.snap.MigrateVersion = snap.MigrateVersion
		s.gen, s.headRev, s.journal = gen, rev, 0
	})
}

// writeSnapshot replaces the state with snap (s.mu held, released during
// the requests), then calls done (s.mu held), also when the outcome was
// unknown and is found committed by a later write.
func (s *Store) writeSnapshot(snap *state.Snapshot, done func(rev int64, gen string)) error {
	b, err := state.EncodeSnapshot(snap)
	if err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	gen, old := state.RandomHex(8), s.gen
	s.mu.Unlock()
	relocked := false
	defer func() {
		if !relocked {
			s.mu.Lock()
		}
	}()
	ctx := context.Background()
	n := 0
	for off := 0; off < len(b) || n == 0; off += chunkSize {
		end := min(off+chunkSize, len(b))
		if _, err := s.guarded(ctx, clientv3.OpPut(s.prefix+chunkKey(gen, n), string(b[off:end]))); err != nil {
			return fmt.Errorf("persist: %w", err)
		}
		n++
	}
	sum := sha256.Sum256(b)
	mb, _ := json.Marshal(meta{Layout: layout, Lineage: snap.Lineage, Serial: snap.Serial, Generation: gen, Chunks: n, Bytes: len(b), SHA256: hex.EncodeToString(sum[:])})
	hb, _ := json.Marshal(head{Serial: snap.Serial, Lineage: snap.Lineage})
	ops := []clientv3.Op{
		clientv3.OpPut(s.prefix+keyMeta, string(mb)),
		clientv3.OpPut(s.prefix+keyHead, string(hb)),
		clientv3.OpDelete(s.prefix+journalDir, clientv3.WithPrefix()),
	}
	if old != "" {
		ops = append(ops, clientv3.OpDelete(s.prefix+snapDir+old+"/", clientv3.WithPrefix()))
	}
	rev, err := s.commit("persist", ops, s.prefix+keyMeta, mb)
	s.mu.Lock()
	relocked = true
	switch {
	case errors.Is(err, errUnsure):
		s.unsure = &pending{s.prefix + keyMeta, mb, func(rev int64) { done(rev, gen) }}
	case err == nil:
		done(rev, gen)
	}
	// On failure the new generation's chunks are orphans: the next
	// writer's Open removes them.
	return err
}

// Import replaces the whole state with snap (push/pull between backends).
// It refuses, unless force, a state of another lineage that is not empty,
// and one whose serial is newer than snap's.
func (s *Store) Import(snap *state.Snapshot, force bool) error {
	if s.lockInfo == nil {
		return state.ErrReadOnly
	}
	b, err := state.EncodeSnapshot(snap)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	in, err := state.DecodeSnapshot(b)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return state.ErrClosed
	}
	defer s.waitIdle()()
	if s.lost != nil {
		return s.lost
	}
	if err := s.settleLocked(); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	if err := state.CheckImport(s.snap, in, force); err != nil {
		return err
	}
	err = s.writeSnapshot(in, func(rev int64, gen string) {
		s.snap, s.gen, s.headRev, s.journal = in, gen, rev, 0
	})
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	return nil
}

// Close persists the state (when writable) and releases the lock; the
// lock is released even when persisting fails (the journal keeps every
// checkpoint then).
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	if s.lockInfo == nil {
		s.closed = true
		s.mu.Unlock()
		return nil
	}
	idle := s.waitIdle()
	err := s.persistLocked()
	idle()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	return errors.Join(err, s.release(), s.cli.Close())
}
