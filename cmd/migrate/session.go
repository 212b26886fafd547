package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/state/backend"
	"github.com/homelab-migrate/migrate/views"
)

// session is what the writing commands (run, rollback) share: the
// runbook loaded, its state locked late (backend.Deferred), the live
// view, the two interrupt contexts and the engine. Until begin it leaves
// the disk as it found it: no lock, no log.
type session struct {
	a            *app
	command      string
	b            backend.Backend
	st           *backend.Deferred
	rv           views.RunView
	stop, cancel context.Context
	abort        func(cause error)
	release      func()
	e            *engine.Engine
	log          *state.Log
	began        bool
	// aliveStop ends keepAlive, which closes aliveDone as it returns.
	aliveStop, aliveDone chan struct{}

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
	if b.Dir == "" {
		_, err := a.stateDir()
		return nil, err
	}
	if w := backend.Warning(b.Config); w != "" {
		a.view().Warn("%s", w)
	}
	st, err := backend.OpenDeferred(context.Background(), b, stateOptions(false))
	if err != nil {
		return nil, err
	}
	command := "run"
	if rollback {
		command = "rollback"
	}
	s := &session{
		a: a, command: command, b: b, st: st,
		rv:  a.view().NewRun(a.runMode(json), rollback),
		log: state.NewLog(b.Dir, command),
	}
	s.stop, s.cancel, s.abort, s.release = interrupts(s.rv.Stopping)
	if s.e, err = a.engine(s.cancel, rb, s.st, parallelism, s.log, s.rv); err != nil {
		s.close(&err)
		return nil, err
	}
	return s, nil
}

// where names the session's state for messages.
func (s *session) where() string { return s.b.Where() }

// begin takes the state lock once the command is about to change
// something (backend.Deferred.Begin) and opens the log.
func (s *session) begin() error {
	w, err := s.st.Begin(context.Background(), stateOptions(true), s.command, s.log.Open)
	if err != nil {
		return err
	}
	s.began = true
	s.watchLock(w)
	s.keepAlive()
	return nil
}

// aliveEvery: a command whose log had no line for this long writes one,
// TIME alive, so that the log of a command killed (SIGKILL) while a long
// step waited says until when it lived: the report draws the kill there,
// not where the step started.
const aliveEvery = 2 * time.Second

// keepAlive writes an alive line into the log after every aliveEvery
// without a line, until close.
func (s *session) keepAlive() {
	s.aliveStop, s.aliveDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.aliveDone)
		t := time.NewTicker(aliveEvery / 4)
		defer t.Stop()
		for {
			select {
			case <-s.aliveStop:
				return
			case <-t.C:
				if s.log.Idle() >= aliveEvery {
					fmt.Fprintf(s.log, "%s alive\n", time.Now().UTC().Format(time.RFC3339Nano))
				}
			}
		}
	}()
}

// watchLock cancels the command at once when w's lock is lost, as a
// second Ctrl-C does: another runner may take the lock and must not find
// this one's steps still at work.
func (s *session) watchLock(w backend.Store) {
	l, ok := w.(backend.LosesLock)
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
	if s.aliveStop != nil {
		close(s.aliveStop)
		<-s.aliveDone
	}
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
