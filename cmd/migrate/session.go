package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/views"
)

// session is what the writing commands (run, rollback) share: the
// runbook loaded, its state, the live view, the two interrupt contexts
// and the engine.
//
// A session reads the state only, without its lock, until begin: until
// then the command may still refuse (a plan made for another state, an
// earlier phase not complete, nothing to do, no confirmation) and must
// leave the disk as it found it: no state directory created, no lock, no
// log, no snapshot rewritten.
type session struct {
	a            *app
	command      string
	b            *phases.BackendConfig
	dir          string // the local state directory, where the log goes
	st           *deferredState
	rv           views.RunView
	stop, cancel context.Context
	abort        func(cause error)
	release      func()
	e            *engine.Engine
	log          *state.Log
	began        bool

	// lockLost is why the state's lock was lost during the command, nil
	// while it was not (under mu).
	mu       sync.Mutex
	lockLost error
}

// openSession loads the runbook, opens its state read-only and builds the
// engine on it. The caller must close it.
func (a *app) openSession(vf varFlags, json, rollback bool, parallelism int) (*session, error) {
	rb, err := a.load(vf)
	if err != nil {
		return nil, err
	}
	b, err := a.backendFor(rb)
	if err != nil {
		return nil, err
	}
	// The log stays on this machine, in the local state directory, even
	// when the state is in etcd.
	dir, err := a.localDir(b)
	if err != nil {
		return nil, err
	}
	if w := backendWarning(b); w != "" {
		a.view().Warn("%s", w)
	}
	ctx := context.Background()
	// A run that holds the lock now is named at once, not after this one
	// has planned and asked for confirmation.
	if info, err := a.readLock(ctx, b); err == nil && info != nil {
		return nil, &state.LockedError{Holder: *info, Path: describe(b, dir)}
	}
	ro, err := a.openBackend(ctx, b, false)
	if err != nil {
		return nil, err
	}
	command := "run"
	if rollback {
		command = "rollback"
	}
	s := &session{
		a: a, command: command, b: b, dir: dir,
		st:  &deferredState{cur: ro},
		rv:  a.view().NewRun(a.runMode(json), rollback),
		log: state.NewLog(dir, command),
	}
	s.stop, s.cancel, s.abort, s.release = interrupts(s.rv.Stopping)
	if s.e, err = a.engine(s.cancel, rb, s.st, parallelism, s.log, s.rv); err != nil {
		s.close(&err)
		return nil, err
	}
	return s, nil
}

// where names the session's state for messages.
func (s *session) where() string {
	if s.b.Type == "local" {
		return filepath.Clean(s.dir)
	}
	return describe(s.b, s.dir)
}

// begin takes the state lock once the command is about to change
// something, creating the state when there is none, and opens the log. The
// state must still be the one the command planned against: another migrate
// may have written it meanwhile.
func (s *session) begin() error {
	before := s.st.Snapshot()
	unchanged := func(now *state.Snapshot) error {
		if now.Serial != before.Serial || before.Lineage != "" && now.Lineage != before.Lineage {
			return fmt.Errorf("the state in %s changed while this %s was being planned (serial %d then, %d now): another migrate wrote it; nothing was changed, run the command again to plan from the state as it is now",
				s.where(), s.command, before.Serial, now.Serial)
		}
		return nil
	}
	// Asked under the lock before the state is written (the local
	// backend), and again here for a backend that does not ask.
	w, err := s.a.openBackendExpecting(context.Background(), s.b, true, unchanged)
	if err != nil {
		return err
	}
	if err := unchanged(w.Snapshot()); err != nil {
		w.Close()
		return err
	}
	if err := s.log.Open(); err != nil {
		w.Close()
		return err
	}
	s.st.swap(w).Close()
	s.began = true
	s.watchLock(w)
	return nil
}

// losesLock is a state whose lock can be lost while it is held: etcd's,
// whose lease a sleeping laptop or a state unlock ends. (A local state's
// flock lasts as long as the process.)
type losesLock interface {
	Lost() <-chan struct{}
	LostCause() error
}

// watchLock cancels the command at once when w's lock is lost, as a
// second Ctrl-C does: another runner may take the lock and must not find
// this one's steps still at work.
func (s *session) watchLock(w stateStore) {
	l, ok := w.(losesLock)
	if !ok {
		return
	}
	go func() {
		select {
		case <-l.Lost():
			why := l.LostCause()
			s.mu.Lock()
			s.lockLost = why
			s.mu.Unlock()
			s.abort(why)
		case <-s.cancel.Done():
		}
	}()
}

// close releases the session in reverse order, the state last so that it
// is saved after everything else stopped; a failure to save it becomes
// *err when there is no error already.
func (s *session) close(err *error) {
	if s.e != nil {
		s.e.Close()
	}
	s.release()
	s.mu.Lock()
	if s.lockLost != nil && *err != nil {
		*err = fmt.Errorf("%w; the steps that were running were cut off at once, as by a second Ctrl-C", s.lockLost)
	}
	s.mu.Unlock()
	s.rv.Finish()
	if s.began {
		fmt.Fprintf(s.log, "%s end: %s\n", time.Now().UTC().Format(time.RFC3339Nano), endText(*err))
		if lerr := s.log.Close(); lerr != nil {
			s.a.view().Warn("%v", lerr)
		}
	}
	s.a.closeState(s.st, err)
}

// endText is how a command ended, for its log.
func endText(err error) string {
	switch {
	case err == nil:
		return "ok"
	case isReported(err):
		return fmt.Sprintf("exit code %d", exitCode(err))
	}
	return err.Error()
}

// deferredState is the state as a session's engine sees it: the state
// read without its lock until begin, the locked one after. A write before
// begin fails as the read-only state's writes do (state.ErrReadOnly).
type deferredState struct {
	mu  sync.RWMutex
	cur stateStore
}

var _ state.Manager = (*deferredState)(nil)

func (d *deferredState) get() stateStore {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.cur
}

// swap puts w in place and returns the state it replaces.
func (d *deferredState) swap(w stateStore) stateStore {
	d.mu.Lock()
	defer d.mu.Unlock()
	old := d.cur
	d.cur = w
	return old
}

func (d *deferredState) Snapshot() *state.Snapshot { return d.get().Snapshot() }
func (d *deferredState) Step(a phases.Address) (*state.StepRecord, bool) {
	return d.get().Step(a)
}
func (d *deferredState) Checkpoint(rec *state.StepRecord) error { return d.get().Checkpoint(rec) }
func (d *deferredState) CheckpointUnsynced(rec *state.StepRecord) error {
	return d.get().CheckpointUnsynced(rec)
}
func (d *deferredState) Persist() error { return d.get().Persist() }
func (d *deferredState) RunningElsewhere(ctx context.Context, rec *state.StepRecord) error {
	return state.RunningElsewhere(ctx, d.get(), rec)
}
func (d *deferredState) Close() error { return d.get().Close() }
