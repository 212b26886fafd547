package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// A gentle stop (the first Ctrl-C, SIGTERM or SIGHUP: Run's stop) starts
// no new step, and lets the running steps that make an effect finish
// making it. What only waits does not go on waiting:
//
//   - a step that only waits or reads (a check, or a step type declared
//     phases.StepType.WaitsOnly: a pause, a readiness poll, an approval)
//     has its context cancelled at once;
//   - a step whose effect is made and that only waits now (an instance
//     started, waiting for its address) learns it from ApplyRequest.Stop
//     and answers Stopped;
//   - a step between two attempts does not try again.
//
// Such a step is recorded as pending — not done, and not failed: nothing
// went wrong, it was not finished — with the message saying what was not
// waited for as its last error, and the Revert of what its apply did, so
// that rollback still undoes it. The run ends with ErrInterrupted, and the
// next run does the step again: its apply finds the effect made and only
// waits.

// errStopped is the cause of the context of a step that only waits,
// cancelled by a gentle stop.
var errStopped = errors.New("the first interrupt stops a step that only waits")

// stopDone is closed at a gentle stop; nil (never) in a rollback, whose
// reverts all finish.
func (r *stepRunner) stopDone() <-chan struct{} {
	if r.stop == nil {
		return nil
	}
	return r.stop.Done()
}

// waitsOnly: s has no effect of its own, so a gentle stop ends it.
func waitsOnly(s *phases.Step, p providers.Interface) bool {
	return s.IsCheck() || p.Schema().StepTypes[s.Addr.Type].WaitsOnly
}

// gentle returns the context an Apply of s runs under: ctx, and for a
// step that only waits, ended by a gentle stop too. Call release when the
// Apply returned.
func (r *stepRunner) gentle(ctx context.Context, s *phases.Step, p providers.Interface) (_ context.Context, release func()) {
	if r.stop == nil || !waitsOnly(s, p) {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	unhook := context.AfterFunc(r.stop, func() { cancel(errStopped) })
	return ctx, func() { unhook(); cancel(nil) }
}

// stoppedWaiting says whether a failed apply of s ended because of a
// gentle stop while it only waited: its provider says so (Stopped), or s
// only waits and the stop came. A failure of such a step then says
// nothing about what it waits for; the next run asks again.
func (r *stepRunner) stoppedWaiting(s *phases.Step, p providers.Interface, resp providers.ApplyResponse) bool {
	if r.stop == nil || r.stop.Err() == nil {
		return false
	}
	return resp.Stopped || waitsOnly(s, p)
}

// notDone records s as not done after a gentle stop ended it (see the
// top of this file): pending, why as its last error, its revert data kept.
func (r *stepRunner) notDone(s *phases.Step, rec *state.StepRecord, why error) bool {
	rec.Outputs = nil
	rec.LastError = why.Error()
	r.mu.Lock()
	if r.stopped == nil {
		r.stopped = map[phases.Address]bool{}
	}
	r.stopped[s.Addr] = true
	r.mu.Unlock()
	r.transition(s, rec, state.Pending, Event{Kind: StepStopped, Error: rec.LastError,
		Message: "not done: stopped while it waited; the next run does it again"})
	return false
}

// wasStopped: s ended not done at a gentle stop, which is no failure.
func (r *stepRunner) wasStopped(a phases.Address) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped[a]
}

// stoppedBetweenAttempts is why a step that failed an attempt and was
// stopped before the next is not done.
func stoppedBetweenAttempts(attempt int, last error) error {
	return fmt.Errorf("stopped before attempt %d (it waited to try again); attempt %d had failed: %w", attempt+1, attempt, last)
}

// readInFlight reads a step a stopped run left running, waiting (in its
// provider) for what that run started; a gentle stop ends the wait, which
// changes nothing.
func (r *stepRunner) readInFlight(s *phases.Step, p providers.Interface, cfg cty.Value, rec *state.StepRecord) providers.ReadResponse {
	ctx := r.cancel
	if r.stop != nil {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		defer context.AfterFunc(r.stop, func() { cancel(errStopped) })()
	}
	return p.Read(ctx, providers.ReadRequest{Type: s.Addr.Type, Addr: s.Addr, Config: cfg, Prior: priorOf(rec), InFlight: true})
}

// leftInFlight ends a step whose in-flight read a gentle stop cut short:
// its record stays running, so that the next run reads it again, and
// waits, before doing anything.
func (r *stepRunner) leftInFlight(s *phases.Step) bool {
	r.mu.Lock()
	if r.stopped == nil {
		r.stopped = map[phases.Address]bool{}
	}
	r.stopped[s.Addr] = true
	r.mu.Unlock()
	r.emit(Event{Kind: StepStopped, Phase: s.Phase, Addr: s.Addr, Check: s.IsCheck(),
		Message: "not done: stopped while it waited for what the last run started; the next run reads it again"})
	return false
}
