package engine

import (
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// ReasonCode says why a step or check gets its action: the rules of
// docs/design.md's "Records", as data. Views say it in words
// (views.Because); --json consumers switch on it.
type ReasonCode string

// The reasons, in the order decide tries its rules.
const (
	NeverRan         ReasonCode = "never_ran"
	NotDone          ReasonCode = "not_done"
	Reverted         ReasonCode = "reverted"
	FailedLastTime   ReasonCode = "failed_last_time"
	RevertUnfinished ReasonCode = "revert_unfinished"
	InFlight         ReasonCode = "in_flight"
	InputsInvalid    ReasonCode = "inputs_invalid"
	ProviderFailed   ReasonCode = "provider_failed"
	ProviderWaits    ReasonCode = "provider_waits"
	InputsChanged    ReasonCode = "inputs_changed"
	InputsUnknown    ReasonCode = "inputs_unknown"
	InputsUntold     ReasonCode = "inputs_untold"
	InputKeyMissing  ReasonCode = "input_key_missing"
	InputKeyOther    ReasonCode = "input_key_other"
	UpstreamReplaced ReasonCode = "upstream_replaced"
	TargetReplaced   ReasonCode = "target_replaced"
	Drifted          ReasonCode = "drifted"
	EffectGone       ReasonCode = "effect_gone"
	Unreadable       ReasonCode = "unreadable"
	StillDone        ReasonCode = "still_done"
	ReadLater        ReasonCode = "read_later"
	Discarded        ReasonCode = "discarded"
	DiscardGoing     ReasonCode = "discard_going"
	HandedOver       ReasonCode = "handed_over"
	PhaseChanges     ReasonCode = "phase_changes"
	CheckPassed      ReasonCode = "check_passed"
	// A rollback's: the record holds revert data, holds none, or what
	// the step made went with a step that discarded it.
	RevertData    ReasonCode = "revert_data"
	Irreversible  ReasonCode = "irreversible"
	NothingToUndo ReasonCode = "nothing_to_undo"
	// KeyRemoved: an instance of a step with for_each whose key left
	// the map; plan and run revert it, as Terraform destroys it.
	KeyRemoved ReasonCode = "key_removed"
	// GroupRemoved: a step of a group call's instance whose key left
	// the call's for_each: the whole instance is gone, and plan and run
	// revert each of its steps.
	GroupRemoved ReasonCode = "group_removed"
	// StepRemoved: a step the runbook no longer has in any form (its
	// block or its group call deleted, or renamed without a moved
	// block); plan and run revert it with its record's provider.
	StepRemoved ReasonCode = "step_removed"
)

// Why holds what a reason names, as data: the steps it is about (By),
// what was and what is (Was, Now: identities, key ids), what a provider
// or a record said (Detail), and, at run, the steps after which a step
// was read again (After).
type Why struct {
	By     []phases.Address `json:"by,omitempty"`
	Was    string           `json:"was,omitempty"`
	Now    string           `json:"now,omitempty"`
	Detail string           `json:"detail,omitempty"`
	After  []phases.Address `json:"after,omitempty"`
}

// Need is what decide must know before it can decide: its driver
// gathers that fact and asks again.
type Need int

const (
	// NeedInputs: the step's inputs, hash and provider (facts.go).
	NeedInputs Need = 1 << iota
	// NeedRead: what its provider observes now.
	NeedRead
	// NeedReadInFlight: run reads a step a stopped run left running,
	// waiting for what it started, before it does it again.
	NeedReadInFlight
	// NeedReadAfter: read it again once By ran (its plan's Recheck).
	NeedReadAfter
	// NeedPlanWhenKnown: its diff waits for steps of this run.
	NeedPlanWhenKnown
)

// Decision is what a step or check does, and why.
type Decision struct {
	Action providers.Action
	Reason ReasonCode
	Why    Why
	Needs  Need
}

// stepFacts is what decide knows of one step, gathered in stages by
// facts.go: the records, then inputs and provider, then a read.
type stepFacts struct {
	Check bool
	Rec   *state.StepRecord // nil: it never ran
	// Rollback: decide what a rollback does with the record.
	Rollback bool
	// Removed: (with Rollback) the record is of a step the runbook no
	// longer has, and why (KeyRemoved: a for_each instance whose key
	// left the map; GroupRemoved: a step of a group call instance whose
	// key left the call's for_each; StepRemoved: a step gone in every
	// form); plan and run revert it.
	Removed ReasonCode
	// Run: decided just before the step is applied or passed over, with
	// what the plan decided (Planned, nil: nothing) and the steps after
	// which it said to read it again (Recheck).
	Run     bool
	Planned *Decision
	Recheck []phases.Address

	// The records of other steps.
	GoingWith, HandedTo, GoneWith *phases.Address
	Upstream                      *Why // a dependency made again since rec
	PhaseChanges                  bool // a check: some step of its phase changes

	// Inputs and provider (HaveInputs once gathered).
	HaveInputs     bool
	InputsInvalid  bool
	ProviderFailed bool
	ProviderWaits  []phases.Address
	ProviderName   string
	Known          bool   // inputs wholly known
	Hash           string // "" when it cannot be known yet
	Matches        bool   // Hash matches the record's
	Key            *Why   // the record's hash is under another key

	// The read (nil until decide asks) and the steps of this run before
	// it that change.
	Read          *providers.ReadResponse
	ChangesBefore []phases.Address
}

// decide is the one decision of a step's lifecycle (docs/design.md,
// "Records"): pure, from facts to an action, a reason and what it still
// needs.
func decide(f stepFacts) Decision {
	rec := f.Rec
	done := rec != nil && rec.Status == state.Done
	switch {
	case f.Rollback:
		return decideRevert(f)
	case f.Check && done && !f.PhaseChanges:
		return Decision{Action: providers.NoOp, Reason: CheckPassed}
	case done && f.GoingWith != nil:
		return Decision{Reason: DiscardGoing, Why: Why{By: []phases.Address{*f.GoingWith}}}
	case done && f.HandedTo != nil && !f.Run:
		return Decision{Reason: HandedOver, Why: Why{By: []phases.Address{*f.HandedTo}}}
	case done && f.GoneWith != nil && !f.Run:
		return Decision{Reason: Discarded, Why: Why{By: []phases.Address{*f.GoneWith}}}
	case !f.HaveInputs:
		return Decision{Needs: NeedInputs}
	case f.InputsInvalid:
		return Decision{Action: providers.Create, Reason: InputsInvalid}
	case f.ProviderFailed:
		return Decision{Action: providers.Create, Reason: ProviderFailed}
	case f.ProviderWaits != nil:
		d := Decision{Action: providers.Create, Reason: ProviderWaits, Needs: NeedPlanWhenKnown,
			Why: Why{By: f.ProviderWaits, Detail: f.ProviderName}}
		if done {
			d.Action = providers.Update
		}
		return d
	case f.Check && done:
		return Decision{Action: providers.Create, Reason: PhaseChanges}
	case f.Check:
		return Decision{Action: providers.Create, Reason: NotDone}
	}
	if f.Run && done && f.Planned != nil && f.Planned.Action != providers.NoOp {
		return *f.Planned // a done step the plan runs anyway: as planned
	}
	switch {
	case rec == nil:
		return Decision{Action: providers.Create, Reason: NeverRan}
	case rec.Status == state.Pending:
		return Decision{Action: providers.Create, Reason: NotDone}
	case rec.Status == state.Reverted:
		return Decision{Action: providers.Create, Reason: Reverted}
	case rec.Status == state.Running && f.Run && f.Read == nil:
		return Decision{Needs: NeedReadInFlight}
	case rec.Status == state.Running && f.Run && f.Read.Observation == providers.Present && !f.Read.Diagnostics.HasErrors():
		return Decision{Reason: InFlight}
	case rec.Status == state.Running:
		return Decision{Action: providers.Create, Reason: InFlight, Needs: NeedPlanWhenKnown}
	case rec.Status == state.Failed:
		return Decision{Action: providers.Create, Reason: FailedLastTime, Why: Why{Detail: rec.LastError}}
	case rec.Status == state.Reverting || rec.Status == state.RevertFailed:
		return Decision{Action: providers.Create, Reason: RevertUnfinished}
	case !f.Matches:
		return inputsDiffer(f)
	case f.Upstream != nil:
		return Decision{Action: providers.Create, Reason: UpstreamReplaced, Why: *f.Upstream}
	case f.Run && len(f.Recheck) == 0:
		return Decision{Reason: StillDone}
	case f.Read == nil:
		return Decision{Needs: NeedRead}
	}
	return observed(f)
}

// inputsDiffer: a done step whose input hash is not its record's.
func inputsDiffer(f stepFacts) Decision {
	d := Decision{Action: providers.Update, Reason: InputsChanged}
	switch {
	case f.Key != nil && f.Hash != "":
		d.Why = *f.Key
		d.Reason = InputKeyOther
		if f.Key.Now == "" {
			d.Reason = InputKeyMissing
		}
	case f.Hash == "" && !f.Known:
		d.Reason, d.Needs = InputsUnknown, NeedPlanWhenKnown
	case f.Hash == "":
		d.Reason, d.Needs = InputsUntold, NeedPlanWhenKnown
	}
	return d
}

// observed decides a done step by what its provider read.
func observed(f stepFacts) Decision {
	read, failed := f.Read, f.Read.Diagnostics.HasErrors()
	if failed && len(f.ChangesBefore) > 0 && !f.Run {
		// What it acts on is made again by steps before it in this run:
		// not there to be read yet, which is no error.
		return Decision{Reason: Unreadable, Why: Why{By: f.ChangesBefore}, Needs: NeedReadAfter}
	}
	if rec := f.Rec; rec.Identity != "" && read.Identity != "" && read.Identity != rec.Identity {
		return Decision{Action: providers.Create, Reason: TargetReplaced, Why: Why{Was: rec.Identity, Now: read.Identity}}
	}
	why := Why{Detail: read.Detail, After: f.Recheck}
	switch {
	case failed && f.Run:
		why.Detail = read.Diagnostics.Err().Error()
		return Decision{Action: providers.Drift, Reason: Unreadable, Why: why}
	case read.Observation == providers.Drifted:
		return Decision{Action: providers.Drift, Reason: Drifted, Why: why}
	case read.Observation == providers.Absent, f.Run && read.Observation != providers.Present:
		return Decision{Action: providers.Drift, Reason: EffectGone, Why: why}
	case len(f.ChangesBefore) > 0 && !f.Run:
		return Decision{Reason: ReadLater, Why: Why{By: f.ChangesBefore}, Needs: NeedReadAfter}
	}
	return Decision{Reason: StillDone}
}

// decideRevert is a rollback's decision for one step.
func decideRevert(f stepFacts) Decision {
	switch rec := f.Rec; {
	case needsRevert(rec) && f.GoneWith != nil:
		return Decision{Action: providers.Revert, Reason: NothingToUndo, Why: Why{By: []phases.Address{*f.GoneWith}}}
	case needsRevert(rec):
		d := Decision{Action: providers.Revert, Reason: RevertData, Why: Why{Detail: "undo"}}
		if f.Removed != "" {
			d.Reason = f.Removed
		}
		if rec.Revert != nil && rec.Revert.Description != "" {
			d.Why.Detail = rec.Revert.Description
		}
		return d
	case rec != nil && rec.Status == state.Done:
		return Decision{Reason: Irreversible}
	}
	return Decision{}
}

// admits: a saved plan's decision for a step (action, reason) holds for
// the fresh one made just before it runs. A decision saved on unknown
// inputs, or by a plan without reasons, admits any.
func admits(saved *StepPlan, fresh Decision) bool {
	switch saved.ReasonCode {
	case "", InputsUnknown, InputsUntold, ProviderWaits, InFlight:
		return true
	}
	return fresh.Action == saved.Action && fresh.Reason == saved.ReasonCode
}

// whyOf is what an event says of d: nothing when d has no reason.
func whyOf(d Decision) *Why {
	if d.Reason == "" {
		return nil
	}
	return &d.Why
}

// needsRevert: the step changed something that it knows how to undo, or
// a rollback of it was under way. A pending step with revert data made its
// effect and was stopped while it waited (steprunner.go).
func needsRevert(rec *state.StepRecord) bool {
	if rec == nil || rec.Check {
		return false
	}
	switch rec.Status {
	case state.Reverting, state.RevertFailed:
		return true
	case state.Done, state.Failed, state.Running, state.Pending:
		return rec.Revert != nil
	}
	return false
}
