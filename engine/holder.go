package engine

import (
	"context"
	"fmt"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
)

// A step recorded running (or reverting) was started by a lock holder
// that may still be at it: a run on another machine whose lease on a
// shared state still lives. Doing it again now would do it twice at
// once, so such a step is refused, its record left as that holder wrote
// it; once that holder is provably gone, the in-flight read (stop.go)
// applies as after any stopped run.

// runningElsewhere refuses s when its record, running or reverting, says
// another holder that may still be alive started it, reporting failed
// with kind (its record unchanged: it is not this run's to write).
func (r *stepRunner) runningElsewhere(s *phases.Step, rec *state.StepRecord, kind EventKind) bool {
	if rec.Status != state.Running && rec.Status != state.Reverting {
		return false
	}
	err := state.RunningElsewhere(r.cancel, r.e.state, rec)
	if err == nil {
		return false
	}
	r.emit(Event{Kind: kind, Phase: s.Phase, Addr: s.Addr, Check: s.IsCheck(), Error: err.Error()})
	return true
}

// cutOff is what the record of a step whose apply the run cancelled (a
// second interrupt, a lost state lock) says: why it was cut off, then
// what the apply answered.
func cutOff(cancel context.Context, err error) error {
	if cancel.Err() == nil {
		return err
	}
	return fmt.Errorf("cut off: %v: %w", context.Cause(cancel), err)
}
