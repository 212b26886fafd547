package views

import "github.com/homelab-migrate/migrate/engine"

// KindDoc documents one kind of event (engine.EventKind): what it says,
// and the JSON fields it may carry besides kind and time (each described
// in EventFields).
type KindDoc struct {
	Kind   engine.EventKind
	Says   string
	Fields []string
}

// FieldDoc documents one field of an event's JSON object (engine.Event).
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
	{"address", "The step or check, as TYPE.NAME (TYPE.NAME[\"KEY\"] for an instance of a step with for_each), prefixed with its group call instance for a step of a group: group.CALL.TYPE.NAME, group.CALL[\"KEY\"].TYPE.NAME."},
	{"group", "For a step or check of a group: its group call instance, group.CALL or group.CALL[\"KEY\"] (the start of address)."},
	{"check", "true when the step is a check block."},
	{"attempt", "Which try of the step this is, from 1."},
	{"duration_ns", "How long it took, in nanoseconds."},
	{"message", "Text for people; its words may change between versions."},
	{"reason_code", "Why a step the plan took as done is planned again, or why there was nothing to undo: one of the reason codes of plan --json."},
	{"why", "What the reason names: by (steps), was and now (identities, key ids), detail (what a provider said), after (steps after which it was read again)."},
	{"error", "What went wrong, redacted and cut to a bounded length (the log keeps it whole)."},
}

// EventKinds documents every kind, in the order of engine/event.go's
// constants.
var EventKinds = []KindDoc{
	{engine.PhaseStarted, "A phase of a run starts.", []string{"phase"}},
	{engine.PhaseUpToDate, "A phase of a run was complete before it and has nothing to do: nothing else is said of it.", []string{"phase"}},
	{engine.PhaseCompleted, "A phase of a run completed: every step done, every check passed.", []string{"phase", "duration_ns"}},
	{engine.PhaseFailed, "A phase of a run or a rollback ended with steps or checks that failed; the command stops there.", []string{"phase", "duration_ns", "error"}},
	{engine.Interrupted, "A phase of a run or a rollback stopped early because it was asked to (Ctrl-C); the state says where.", []string{"phase"}},
	{engine.PhaseRollbackStarted, "A phase of a rollback starts.", []string{"phase"}},
	{engine.PhaseRolledBack, "A phase of a rollback completed: every step it could undo is undone.", []string{"phase", "duration_ns"}},
	{engine.StepStarted, "A try of a step or check starts.", []string{"phase", "address", "group", "check", "attempt"}},
	{engine.StepOutput, "A line a step printed, in message.", []string{"phase", "address", "group", "check", "message"}},
	{engine.StepPlanned, "A step whose plan waited for earlier steps, or whose record no longer holds (reason), is planned just before it runs: message is its diff.", []string{"phase", "address", "group", "check", "message", "reason_code", "why"}},
	{engine.StepRetrying, "A try failed (error) and the step will be tried again after a pause (message).", []string{"phase", "address", "group", "check", "attempt", "message", "error"}},
	{engine.StepDone, "A step is done, or a check passed.", []string{"phase", "address", "group", "check", "duration_ns"}},
	{engine.StepFailed, "A step or check failed for good; the steps that depend on it are skipped.", []string{"phase", "address", "group", "check", "error"}},
	{engine.StepSkipped, "A step did not run because a step it depends on failed.", []string{"phase", "address", "group", "message"}},
	{engine.StepAdopted, "A step a stopped run left running was found done, and is recorded done without running it again.", []string{"phase", "address", "group", "message"}},
	{engine.StepStopped, "The first Ctrl-C ended a step while it only waited (message says for what): it is not done, and the next run does it again, or reads it again.", []string{"phase", "address", "group", "check", "message", "error"}},
	{engine.StepReverting, "The rollback starts undoing a step; message says how.", []string{"phase", "address", "group", "message"}},
	{engine.StepReverted, "A step is undone (reason_code says why there was nothing to undo), or a check is void after its phase was rolled back.", []string{"phase", "address", "group", "check", "duration_ns", "reason_code", "why"}},
	{engine.StepRevertFailed, "A step could not be undone; the steps it depends on are left as they are.", []string{"phase", "address", "group", "error"}},
}
