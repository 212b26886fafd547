package engine

import (
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
)

// EventKind says what happened. Views and the --json stream go by it
// alone: a Message is for people, and nothing decides on its words.
type EventKind string

// The kinds of events: a phase's, then a step's. views.EventKinds
// documents each (the reference lists them from it).
const (
	PhaseStarted EventKind = "phase_started"
	// PhaseUpToDate: the phase was complete before the run and has
	// nothing to do; it is not walked (no PhaseCompleted follows).
	PhaseUpToDate  EventKind = "phase_up_to_date"
	PhaseCompleted EventKind = "phase_completed"
	// PhaseFailed and Interrupted end a phase of a run or of a rollback.
	PhaseFailed EventKind = "phase_failed"
	Interrupted EventKind = "interrupted"
	// PhaseRollbackStarted and PhaseRolledBack open and close a phase of
	// a rollback, as PhaseStarted and PhaseCompleted do one of a run.
	PhaseRollbackStarted EventKind = "phase_rollback_started"
	PhaseRolledBack      EventKind = "phase_rolled_back"

	StepStarted EventKind = "step_started"
	StepOutput  EventKind = "step_output"
	// StepPlanned carries, as its Message, the diff of a step planned
	// again just before it is applied, once the steps it waited for ran.
	StepPlanned  EventKind = "step_planned"
	StepRetrying EventKind = "step_retrying"
	StepDone     EventKind = "step_done"
	StepFailed   EventKind = "step_failed"
	StepSkipped  EventKind = "step_skipped"
	// StepAdopted: a step a stopped run left running was found done, and
	// is recorded done without being applied again.
	StepAdopted EventKind = "step_adopted"
	// StepStopped: a gentle stop ended the step while it only waited; it
	// is recorded as not done (pending), Error saying what was not
	// waited for, and the next run does it again. A step a stopped run
	// left running, stopped while it is read, stays running: the next
	// run reads it again.
	StepStopped      EventKind = "step_stopped"
	StepReverting    EventKind = "step_reverting"
	StepReverted     EventKind = "step_reverted"
	StepRevertFailed EventKind = "step_revert_failed"
)

// Event is one thing that happened during a run or rollback. Message never
// contains a sensitive value in clear.
type Event struct {
	Kind  EventKind      `json:"kind"`
	Time  time.Time      `json:"time"`
	Phase string         `json:"phase,omitempty"`
	Addr  phases.Address `json:"address,omitzero"`
	// Group is the group call instance of a step of a group
	// (Addr.GroupPrefix()); emit fills it.
	Group    string        `json:"group,omitempty"`
	Check    bool          `json:"check,omitempty"`
	Attempt  int           `json:"attempt,omitempty"`
	Duration time.Duration `json:"duration_ns,omitempty"`
	Message  string        `json:"message,omitempty"`
	// ReasonCode, on a StepPlanned event, says why a step the plan took
	// as done is planned again now (its record describes a world since
	// replaced; read again, it is no longer done), empty when the plan
	// waited for its inputs; on a StepReverted event, why there was
	// nothing to undo. Why holds what it names; views say it in words.
	ReasonCode ReasonCode `json:"reason_code,omitempty"`
	Why        *Why       `json:"why,omitempty"`
	Error      string     `json:"error,omitempty"`
	// Record is the step's new record when the event changes it; the
	// StateHook makes it durable. It is not part of the JSON stream.
	Record *state.StepRecord `json:"-"`
}
