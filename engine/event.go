package engine

import (
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
)

// EventKind says what happened. Views and the --json stream go by it
// alone: a Message is for people, and nothing decides on its words.
type EventKind string

// The kinds of events: a phase's, then a step's. EventKinds documents
// each (the reference lists them from it).
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
	Kind     EventKind      `json:"kind"`
	Time     time.Time      `json:"time"`
	Phase    string         `json:"phase,omitempty"`
	Addr     phases.Address `json:"address,omitzero"`
	Check    bool           `json:"check,omitempty"`
	Attempt  int            `json:"attempt,omitempty"`
	Duration time.Duration  `json:"duration_ns,omitempty"`
	Message  string         `json:"message,omitempty"`
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

// KindDoc documents one kind of event: what it says, and the JSON fields
// it may carry besides kind and time (each described in EventFields).
type KindDoc struct {
	Kind   EventKind
	Says   string
	Fields []string
}

// FieldDoc documents one field of an event's JSON object.
type FieldDoc struct {
	Name string
	Says string
}

// EventFields are the fields of an event's JSON object (one object per
// line on standard output with --json).
var EventFields = []FieldDoc{
	{"kind", "What happened: one of the kinds below. A consumer goes by it alone."},
	{"time", "When, in RFC 3339 with nanoseconds."},
	{"phase", "The phase the event belongs to."},
	{"address", "The step or check, as TYPE.NAME."},
	{"check", "true when the step is a check block."},
	{"attempt", "Which try of the step this is, from 1."},
	{"duration_ns", "How long it took, in nanoseconds."},
	{"message", "Text for people; its words may change between versions."},
	{"reason_code", "Why a step the plan took as done is planned again, or why there was nothing to undo: one of the reason codes of plan --json."},
	{"why", "What the reason names: by (steps), was and now (identities, key ids), detail (what a provider said), after (steps after which it was read again)."},
	{"error", "What went wrong, redacted and cut to a bounded length (the log keeps it whole)."},
}

// EventKinds documents every kind, in the order of the constants.
var EventKinds = []KindDoc{
	{PhaseStarted, "A phase of a run starts.", []string{"phase"}},
	{PhaseUpToDate, "A phase of a run was complete before it and has nothing to do: nothing else is said of it.", []string{"phase"}},
	{PhaseCompleted, "A phase of a run completed: every step done, every check passed.", []string{"phase", "duration_ns"}},
	{PhaseFailed, "A phase of a run or a rollback ended with steps or checks that failed; the command stops there.", []string{"phase", "duration_ns", "error"}},
	{Interrupted, "A phase of a run or a rollback stopped early because it was asked to (Ctrl-C); the state says where.", []string{"phase"}},
	{PhaseRollbackStarted, "A phase of a rollback starts.", []string{"phase"}},
	{PhaseRolledBack, "A phase of a rollback completed: every step it could undo is undone.", []string{"phase", "duration_ns"}},
	{StepStarted, "A try of a step or check starts.", []string{"phase", "address", "check", "attempt"}},
	{StepOutput, "A line a step printed, in message.", []string{"phase", "address", "check", "message"}},
	{StepPlanned, "A step whose plan waited for earlier steps, or whose record no longer holds (reason), is planned just before it runs: message is its diff.", []string{"phase", "address", "check", "message", "reason_code", "why"}},
	{StepRetrying, "A try failed (error) and the step will be tried again after a pause (message).", []string{"phase", "address", "check", "attempt", "message", "error"}},
	{StepDone, "A step is done, or a check passed.", []string{"phase", "address", "check", "duration_ns"}},
	{StepFailed, "A step or check failed for good; the steps that depend on it are skipped.", []string{"phase", "address", "check", "error"}},
	{StepSkipped, "A step did not run because a step it depends on failed.", []string{"phase", "address", "message"}},
	{StepAdopted, "A step a stopped run left running was found done, and is recorded done without running it again.", []string{"phase", "address", "message"}},
	{StepStopped, "The first Ctrl-C ended a step while it only waited (message says for what): it is not done, and the next run does it again, or reads it again.", []string{"phase", "address", "check", "message", "error"}},
	{StepReverting, "The rollback starts undoing a step; message says how.", []string{"phase", "address", "message"}},
	{StepReverted, "A step is undone (reason_code says why there was nothing to undo), or a check is void after its phase was rolled back.", []string{"phase", "address", "check", "duration_ns", "reason_code", "why"}},
	{StepRevertFailed, "A step could not be undone; the steps it depends on are left as they are.", []string{"phase", "address", "error"}},
}
