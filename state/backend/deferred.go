package backend

import (
	"context"
	"fmt"
	"sync"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
)

// Deferred is the state of a command that writes (run, rollback), locked
// late: read without its lock until Begin, the locked one after. Until
// then the command may still refuse (a plan made for another state, an
// earlier phase not complete, nothing to do, no confirmation) and leaves
// the disk as it found it: no state directory created, no lock, no
// snapshot rewritten. A write before Begin fails as the read-only state's
// writes do (state.ErrReadOnly).
type Deferred struct {
	b   Backend
	mu  sync.RWMutex
	cur Store
}

var _ state.Manager = (*Deferred)(nil)

// OpenDeferred opens b's state read-only for a command that will write it
// later. A state whose lock is held now is refused at once (a
// state.LockedError), not after the command has planned and asked for
// confirmation.
func OpenDeferred(ctx context.Context, b Backend, opts state.Options) (*Deferred, error) {
	if info, err := b.ReadLock(ctx); err == nil && info != nil {
		return nil, &state.LockedError{Holder: *info, Path: b.String()}
	}
	opts.Lock = nil
	ro, err := b.Open(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &Deferred{b: b, cur: ro}, nil
}

// Begin takes the state lock (opts.Lock) once the command (named by
// command, for messages) is about to change something, creating the
// state when there is none. The state must still be the one the command
// planned against: another migrate may have written it meanwhile. ready,
// when set, is called under the lock before the locked state takes the
// read-only one's place (the command opens its log); its error closes the
// lock and leaves the state read-only. Begin returns the locked state.
func (d *Deferred) Begin(ctx context.Context, opts state.Options, command string, ready func() error) (Store, error) {
	before := d.Snapshot()
	unchanged := func(now *state.Snapshot) error {
		if now.Serial != before.Serial || before.Lineage != "" && now.Lineage != before.Lineage {
			return fmt.Errorf("the state in %s changed while this %s was being planned (serial %d then, %d now): another migrate wrote it; nothing was changed, run the command again to plan from the state as it is now",
				d.b.Where(), command, before.Serial, now.Serial)
		}
		return nil
	}
	// Asked under the lock before the state is written (the local
	// backend), and again here for a backend that does not ask.
	opts.Expect = unchanged
	w, err := d.b.Open(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := unchanged(w.Snapshot()); err != nil {
		w.Close()
		return nil, err
	}
	if ready != nil {
		if err := ready(); err != nil {
			w.Close()
			return nil, err
		}
	}
	d.swap(w).Close()
	return w, nil
}

func (d *Deferred) get() Store {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.cur
}

// swap puts w in place and returns the state it replaces.
func (d *Deferred) swap(w Store) Store {
	d.mu.Lock()
	defer d.mu.Unlock()
	old := d.cur
	d.cur = w
	return old
}

func (d *Deferred) Snapshot() *state.Snapshot { return d.get().Snapshot() }
func (d *Deferred) Step(a phases.Address) (*state.StepRecord, bool) {
	return d.get().Step(a)
}
func (d *Deferred) Checkpoint(rec *state.StepRecord) error { return d.get().Checkpoint(rec) }
func (d *Deferred) CheckpointUnsynced(rec *state.StepRecord) error {
	return d.get().CheckpointUnsynced(rec)
}
func (d *Deferred) Persist() error { return d.get().Persist() }
func (d *Deferred) RunningElsewhere(ctx context.Context, rec *state.StepRecord) error {
	return state.RunningElsewhere(ctx, d.get(), rec)
}
func (d *Deferred) Close() error { return d.get().Close() }
