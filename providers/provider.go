package providers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
)

// Interface is implemented by every provider.
type Interface interface {
	// Schema describes the provider block and the step types.
	Schema() phases.Schema
	// Configure receives the evaluated provider block once, before any
	// other call.
	Configure(context.Context, ConfigureRequest) ConfigureResponse
	// Read observes what is there now, so the engine can detect drift and
	// decide whether an interrupted step finished.
	Read(context.Context, ReadRequest) ReadResponse
	// Plan says what Apply would do, with a diff a person can read.
	Plan(context.Context, PlanRequest) PlanResponse
	// Apply makes the change and returns how to undo it.
	Apply(context.Context, ApplyRequest) ApplyResponse
}

// Reverter is implemented by providers whose steps can be rolled back.
type Reverter interface {
	Revert(context.Context, RevertRequest) RevertResponse
}

// InputDigester is implemented by providers whose steps depend on more
// than their attributes: files named by them (a Talos step's patches), or
// the provider block (a pinned version). The digest joins the step's input
// hash, so that changing a patch plans an update, not a drift.
type InputDigester interface {
	InputDigest(context.Context, DigestRequest) DigestResponse
}

type DigestRequest struct {
	Type   string
	Addr   phases.Address
	Config cty.Value
}

type DigestResponse struct {
	// Digest is what to add to the hash; empty adds nothing.
	Digest string
	// Resolved names, for a person, what the digest was taken of when
	// the runbook does not say it (a remote chart without a pinned
	// version: "chart x resolved to version 1.2.3"). A saved plan keeps
	// it, and run --plan names it when the digest changed. No secret.
	Resolved string
	// Unknown says the digest cannot be known yet (an attribute depends
	// on a step that has not run): the plan then says update.
	Unknown     bool
	Diagnostics phases.Diagnostics
}

// Closer is implemented by providers holding connections or processes.
type Closer interface {
	Close() error
}

// Factory makes a provider instance. cmd/migrate builds the registry, a
// map from provider type ("local", "incus", ...) to its Factory.
type Factory func() Interface

// Action is what a plan intends for a step.
type Action int

const (
	NoOp   Action = iota // no-op
	Create               // create
	Update               // update
	Drift                // drift
	Revert               // revert
)

var actionNames = [...]string{"no-op", "create", "update", "drift", "revert"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "unknown"
}

// MarshalText writes an action by its name ("create"), as plans keep it.
func (a Action) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText reads an action from its name.
func (a *Action) UnmarshalText(b []byte) error {
	i := slices.Index(actionNames[:], string(b))
	if i < 0 {
		return fmt.Errorf("unknown action %q", b)
	}
	*a = Action(i)
	return nil
}

// Observation is what Read found.
type Observation int

const (
	// Unknown: the provider cannot tell (an exec step without creates).
	Unknown Observation = iota
	// Absent: the step's effect is not there; it has not run or was undone.
	Absent
	// Present: the step's effect is there and matches the record.
	Present
	// Drifted: the effect is there but differs from the record.
	Drifted
)

var observationNames = [...]string{"unknown", "absent", "present", "drifted"}

func (o Observation) String() string {
	if int(o) < len(observationNames) {
		return observationNames[o]
	}
	return "invalid"
}

// Prior is what the state remembers of a step's last successful apply.
type Prior struct {
	// Outputs as recorded (sensitive values already redacted).
	Outputs cty.Value
	// Private is opaque provider data kept in state (never sensitive).
	Private json.RawMessage
	// Revert as returned by Apply.
	Revert *RevertData
}

type ConfigureRequest struct {
	Name   string
	Config cty.Value
	// Dir is the runbook directory, for relative paths.
	Dir string
	// StateDir is the directory of the state's local files (the file
	// state's, or where an etcd state's commands keep their logs): what
	// a provider keeps with the state, too big for a record (Talos' etcd
	// snapshots), goes there. Empty when there is none (tests).
	StateDir string
}

type ConfigureResponse struct {
	Diagnostics phases.Diagnostics
}

type ReadRequest struct {
	Type   string
	Addr   phases.Address
	Config cty.Value
	// Prior is nil when the step never completed.
	Prior *Prior
	// InFlight: a run stopped while this step was being applied. What it
	// started may still be under way (a node installing and rebooting):
	// wait for it as the first run would have before saying Absent.
	InFlight bool
	// Rebase: steps of the runbook that depend on this one have just run
	// and may have changed its effect on purpose (a restore unpacks and
	// chowns a copy's destination). Report the effect as it is now in
	// Private: it becomes the record that later reads compare with, so
	// that only a change from outside the runbook is drift. Asked only of
	// step types whose schema says Rebase.
	Rebase bool
}

type ReadResponse struct {
	Observation Observation
	// Detail explains a drift, for the plan.
	Detail string
	// Outputs observed, when Present; the engine keeps the recorded ones
	// otherwise.
	Outputs cty.Value
	// Revert, when Present and Prior is nil (a step interrupted before its
	// completion was recorded), says how to undo what was found, so that a
	// step adopted on resume can still be rolled back.
	Revert *RevertData
	// Identity names the thing the step acts on as it is now (an
	// instance's UUID, a cluster's UID); see ApplyResponse.Identity.
	Identity string
	// Private, for a Rebase read, replaces the recorded private data.
	Private     json.RawMessage
	Diagnostics phases.Diagnostics
}

type PlanRequest struct {
	Type   string
	Addr   phases.Address
	Config cty.Value
	Prior  *Prior
	// Action is what the engine intends (Create, Update or Drift).
	Action Action
	// AfterChanges says that a step this one depends on changes in this
	// run before it: what the step reads (a file an earlier step writes,
	// a path an earlier command creates) may not be there yet, and its
	// absence is then no error at plan time, only a note in the diff.
	AfterChanges bool
}

type PlanResponse struct {
	// Diff is human-readable text shown under the step in a plan; it must
	// not contain sensitive values in clear.
	Diff string
	// Irreversible, when not empty, says why a rollback will not be able
	// to undo the step once applied ("no revert command"); the plan shows
	// it before anything runs.
	Irreversible string
	// Private is passed back in ApplyRequest.Planned.
	Private json.RawMessage
	// Outputs, when not cty.NilVal, are the step's outputs as far as the
	// plan knows them: its unknown parts are known after apply. Steps
	// after it are planned with the known parts (a node's taints, from
	// the machine config about to be applied), so they can be judged
	// before anything runs. Apply must produce the same known values: a
	// step planned with them fails at run if they changed.
	Outputs cty.Value
	// CopyBytes is how many bytes the step expects to copy, as far as the
	// plan can tell (a tree read at plan): the plan's estimate of a
	// service's downtime divides it by the copy rate measured on this
	// host. Not an output: what is copied may change before the apply.
	CopyBytes   int64
	Diagnostics phases.Diagnostics
}

// Approval is the human consent given for an approval step.
type Approval struct {
	// By is user@host; empty when nobody approved.
	By string
	// Prompt asks the person at the terminal; nil when not interactive.
	Prompt func(question string) (bool, error)
}

type ApplyRequest struct {
	Type    string
	Addr    phases.Address
	Config  cty.Value
	Prior   *Prior
	Planned json.RawMessage
	// Approval carries --approve and the terminal, for approval steps.
	Approval Approval
	// Log receives the step's output (command output and the like); it is
	// the terminal and log, never the state.
	Log io.Writer
	// Stop is closed when a gentle stop was asked (the first Ctrl-C):
	// an Apply whose effect is made and that only waits now (for an
	// address, for objects to be ready, for a Job) stops waiting at
	// once and answers Stopped; one still making its effect finishes
	// it. nil: no stop will come. (A step type that only waits is
	// declared WaitsOnly instead: the engine cancels its context.)
	Stop <-chan struct{}
	// Intent, called before a change Apply cannot take back by itself
	// (a user's file moved aside), saves how to undo what is done and
	// about to be done in the step's running record, durably, before it
	// returns: a run killed before Apply returns leaves a record that
	// rollback undoes, and the next Apply gets it in Prior.Revert. It is
	// called from the goroutine of Apply; it crosses the plugin pipe
	// (providers/plugin). nil: nothing can be saved (a test calling the
	// provider directly); the step then does without.
	Intent func(RevertData) error
}

type ApplyResponse struct {
	// Outputs may contain values marked phases.SensitiveMark.
	Outputs cty.Value
	Private json.RawMessage
	// Revert says how to undo this apply; nil means it cannot be undone.
	Revert *RevertData
	// Facts are worth keeping in the state, such as who approved.
	Facts map[string]string
	// Identity names the thing the step made or acted on, such that a
	// thing deleted and made again under the same name has another one:
	// an instance's UUID, a cluster's UID. Empty when the step has none.
	// The engine records it, and the identities of what a step depends
	// on, so that a record made on a world since replaced is not taken
	// as proof about the new one (docs/design.md, "Records").
	Identity string
	// Stopped says the Apply ended early because Stop was closed while
	// it only waited: its effect is made (Revert undoes it), what it
	// waited for was not waited for, and its error diagnostics say
	// which. The engine records the step as not done; the next run
	// applies it again, which finds the effect and only waits.
	Stopped     bool
	Diagnostics phases.Diagnostics
}

// RevertData is how to revert an applied step; see phases.RevertData.
type RevertData = phases.RevertData

// RevertRequest asks to undo a step. A revert may run more than once: one
// interrupted before its end was recorded runs again (Resumed), so it must
// be safe to repeat, or observe its own completion and skip what is done.
type RevertRequest struct {
	Type    string
	Addr    phases.Address
	Config  cty.Value
	Revert  RevertData
	Outputs cty.Value
	// Resumed: a revert of this step was started before and not recorded
	// as finished (a rollback was killed, or the revert failed).
	Resumed bool
	Log     io.Writer
}

type RevertResponse struct {
	Diagnostics phases.Diagnostics
}

// PresentIfPrior is the Read of steps with no lasting effect of their own
// (checks, waits, approvals): done once they completed.
func PresentIfPrior(req ReadRequest) ReadResponse {
	if req.Prior != nil {
		return ReadResponse{Observation: Present}
	}
	return ReadResponse{Observation: Absent}
}
