package engine

import (
	"testing"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// TestDecide has a row for each rule of docs/design.md's "Records" (and
// of resume, rollback and checks), named by the reason code it gives:
// decide is pure, so each row is facts in, a decision out.
func TestDecide(t *testing.T) {
	vm, del := phases.Address{Type: "incus_instance", Name: "vm"}, phases.Address{Type: "exec", Name: "delete"}
	rec := func(st state.Status) *state.StepRecord {
		return &state.StepRecord{Status: st, Identity: "uuid-1", LastError: "exit 1", Revert: &phases.RevertData{Description: "delete it"}}
	}
	done := rec(state.Done)
	known := func(r *state.StepRecord) stepFacts {
		return stepFacts{Rec: r, HaveInputs: true, Known: true, Hash: "h", Matches: r != nil && r.Status == state.Done}
	}
	with := func(f stepFacts, change func(*stepFacts)) stepFacts { change(&f); return f }
	read := func(obs providers.Observation, identity, detail string) *providers.ReadResponse {
		return &providers.ReadResponse{Observation: obs, Identity: identity, Detail: detail}
	}
	unreadable := &providers.ReadResponse{Diagnostics: phases.Errorf("Unreachable", "connection refused")}
	vmAddr := []phases.Address{vm}
	for _, row := range []struct {
		name string
		f    stepFacts
		want Decision
	}{
		// What its record says of the step itself.
		{"never_ran", known(nil), Decision{Action: providers.Create, Reason: NeverRan}},
		{"not_done", known(rec(state.Pending)), Decision{Action: providers.Create, Reason: NotDone}},
		{"reverted", known(rec(state.Reverted)), Decision{Action: providers.Create, Reason: Reverted}},
		{"failed_last_time", known(rec(state.Failed)), Decision{Action: providers.Create, Reason: FailedLastTime, Why: Why{Detail: "exit 1"}}},
		{"revert_unfinished", known(rec(state.RevertFailed)), Decision{Action: providers.Create, Reason: RevertUnfinished}},
		// Resume: a step recorded running is read first, and redone only if
		// it did not finish; the plan defers its diff to the run.
		{"in_flight", known(rec(state.Running)), Decision{Action: providers.Create, Reason: InFlight, Needs: NeedPlanWhenKnown}},
		{"in_flight/run_reads_first", with(known(rec(state.Running)), func(f *stepFacts) { f.Run = true }), Decision{Needs: NeedReadInFlight}},
		{"in_flight/adopted", with(known(rec(state.Running)), func(f *stepFacts) { f.Run, f.Read = true, read(providers.Present, "", "") }), Decision{Reason: InFlight}},
		{"in_flight/redone", with(known(rec(state.Running)), func(f *stepFacts) { f.Run, f.Read = true, read(providers.Absent, "", "") }), Decision{Action: providers.Create, Reason: InFlight, Needs: NeedPlanWhenKnown}},
		// Its inputs and provider.
		{"needs_inputs", stepFacts{Rec: done}, Decision{Needs: NeedInputs}},
		{"inputs_invalid", with(known(nil), func(f *stepFacts) { f.InputsInvalid = true }), Decision{Action: providers.Create, Reason: InputsInvalid}},
		{"provider_failed", with(known(done), func(f *stepFacts) { f.ProviderFailed = true }), Decision{Action: providers.Create, Reason: ProviderFailed}},
		{"provider_waits", with(known(done), func(f *stepFacts) { f.ProviderWaits, f.ProviderName = vmAddr, "talos.node" }),
			Decision{Action: providers.Update, Reason: ProviderWaits, Why: Why{By: vmAddr, Detail: "talos.node"}, Needs: NeedPlanWhenKnown}},
		{"inputs_changed", with(known(done), func(f *stepFacts) { f.Matches = false }), Decision{Action: providers.Update, Reason: InputsChanged}},
		{"inputs_unknown", with(known(done), func(f *stepFacts) { f.Matches, f.Hash, f.Known = false, "", false }),
			Decision{Action: providers.Update, Reason: InputsUnknown, Needs: NeedPlanWhenKnown}},
		{"inputs_untold", with(known(done), func(f *stepFacts) { f.Matches, f.Hash = false, "" }),
			Decision{Action: providers.Update, Reason: InputsUntold, Needs: NeedPlanWhenKnown}},
		{"input_key_missing", with(known(done), func(f *stepFacts) { f.Matches, f.Key = false, &Why{Was: "k1"} }),
			Decision{Action: providers.Update, Reason: InputKeyMissing, Why: Why{Was: "k1"}}},
		{"input_key_other", with(known(done), func(f *stepFacts) { f.Matches, f.Key = false, &Why{Was: "k1", Now: "k2"} }),
			Decision{Action: providers.Update, Reason: InputKeyOther, Why: Why{Was: "k1", Now: "k2"}}},
		// Records: a record carries the world it was made in; planning
		// compares it, without asking the provider.
		{"upstream_replaced", with(known(done), func(f *stepFacts) { f.Upstream = &Why{By: vmAddr, Now: "uuid-2"} }),
			Decision{Action: providers.Create, Reason: UpstreamReplaced, Why: Why{By: vmAddr, Now: "uuid-2"}}},
		// A done step whose inputs hold is read.
		{"needs_read", known(done), Decision{Needs: NeedRead}},
		// Records: a record carries the identity of its target.
		{"target_replaced", with(known(done), func(f *stepFacts) { f.Read = read(providers.Present, "uuid-2", "") }),
			Decision{Action: providers.Create, Reason: TargetReplaced, Why: Why{Was: "uuid-1", Now: "uuid-2"}}},
		// Drift means a change from outside.
		{"drifted", with(known(done), func(f *stepFacts) { f.Read = read(providers.Drifted, "uuid-1", "mode 0600 -> 0644") }),
			Decision{Action: providers.Drift, Reason: Drifted, Why: Why{Detail: "mode 0600 -> 0644"}}},
		{"effect_gone", with(known(done), func(f *stepFacts) { f.Read = read(providers.Absent, "", "") }), Decision{Action: providers.Drift, Reason: EffectGone}},
		{"still_done", with(known(done), func(f *stepFacts) { f.Read = read(providers.Present, "uuid-1", "") }), Decision{Reason: StillDone}},
		// Records: a dependency recreated in a run sends its dependents
		// back to planning: unchanged for now, read again after it.
		{"read_later", with(known(done), func(f *stepFacts) { f.Read, f.ChangesBefore = read(providers.Present, "uuid-1", ""), vmAddr }),
			Decision{Reason: ReadLater, Why: Why{By: vmAddr}, Needs: NeedReadAfter}},
		{"unreadable", with(known(done), func(f *stepFacts) { f.Read, f.ChangesBefore = unreadable, vmAddr }),
			Decision{Reason: Unreadable, Why: Why{By: vmAddr}, Needs: NeedReadAfter}},
		// ... and just before it would be passed over, the run compares
		// the worlds again and reads it.
		{"still_done/run_without_recheck", with(known(done), func(f *stepFacts) { f.Run, f.Planned = true, &Decision{} }), Decision{Reason: StillDone}},
		{"upstream_replaced/run", with(known(done), func(f *stepFacts) { f.Run, f.Upstream = true, &Why{By: vmAddr} }),
			Decision{Action: providers.Create, Reason: UpstreamReplaced, Why: Why{By: vmAddr}}},
		{"needs_read/run_recheck", with(known(done), func(f *stepFacts) { f.Run, f.Recheck = true, vmAddr }), Decision{Needs: NeedRead}},
		{"effect_gone/run_recheck", with(known(done), func(f *stepFacts) { f.Run, f.Recheck, f.Read = true, vmAddr, read(providers.Absent, "", "") }),
			Decision{Action: providers.Drift, Reason: EffectGone, Why: Why{After: vmAddr}}},
		{"unreadable/run_recheck", with(known(done), func(f *stepFacts) { f.Run, f.Recheck, f.Read = true, vmAddr, unreadable }),
			Decision{Action: providers.Drift, Reason: Unreadable, Why: Why{After: vmAddr, Detail: unreadable.Diagnostics.Err().Error()}}},
		{"drifted/run_as_planned", with(known(done), func(f *stepFacts) { f.Run, f.Planned = true, &Decision{Action: providers.Drift, Reason: Drifted} }),
			Decision{Action: providers.Drift, Reason: Drifted}},
		// Records: what went with a done deletion is not asked about; what
		// goes with one a stopped run was applying, or was handed over to
		// a step it was applying, is not read until that one is recorded.
		{"discarded", stepFacts{Rec: done, GoneWith: &del}, Decision{Reason: Discarded, Why: Why{By: []phases.Address{del}}}},
		{"discard_going", stepFacts{Rec: done, GoingWith: &del}, Decision{Reason: DiscardGoing, Why: Why{By: []phases.Address{del}}}},
		{"handed_over", stepFacts{Rec: done, HandedTo: &del}, Decision{Reason: HandedOver, Why: Why{By: []phases.Address{del}}}},
		// Checks.
		{"check_passed", stepFacts{Check: true, Rec: done}, Decision{Reason: CheckPassed}},
		{"phase_changes", with(known(done), func(f *stepFacts) { f.Check, f.PhaseChanges = true, true }), Decision{Action: providers.Create, Reason: PhaseChanges}},
		{"not_done/check", with(known(nil), func(f *stepFacts) { f.Check = true }), Decision{Action: providers.Create, Reason: NotDone}},
		{"needs_inputs/check", stepFacts{Check: true}, Decision{Needs: NeedInputs}},
		// Rollback.
		{"revert_data", stepFacts{Rollback: true, Rec: done}, Decision{Action: providers.Revert, Reason: RevertData, Why: Why{Detail: "delete it"}}},
		{"revert_data/unfinished", stepFacts{Rollback: true, Rec: rec(state.Reverting)}, Decision{Action: providers.Revert, Reason: RevertData, Why: Why{Detail: "delete it"}}},
		{"nothing_to_undo", stepFacts{Rollback: true, Rec: done, GoneWith: &del}, Decision{Action: providers.Revert, Reason: NothingToUndo, Why: Why{By: []phases.Address{del}}}},
		{"irreversible", stepFacts{Rollback: true, Rec: &state.StepRecord{Status: state.Done}}, Decision{Reason: Irreversible}},
		{"key_removed", stepFacts{Rollback: true, Removed: KeyRemoved, Rec: done}, Decision{Action: providers.Revert, Reason: KeyRemoved, Why: Why{Detail: "delete it"}}},
		{"group_removed", stepFacts{Rollback: true, Removed: GroupRemoved, Rec: done}, Decision{Action: providers.Revert, Reason: GroupRemoved, Why: Why{Detail: "delete it"}}},
		{"step_removed", stepFacts{Rollback: true, Removed: StepRemoved, Rec: done}, Decision{Action: providers.Revert, Reason: StepRemoved, Why: Why{Detail: "delete it"}}},
		{"step_removed/irreversible", stepFacts{Rollback: true, Removed: StepRemoved, Rec: &state.StepRecord{Status: state.Done}}, Decision{Reason: Irreversible}},
		{"nothing_to_undo/group_removed", stepFacts{Rollback: true, Removed: GroupRemoved, Rec: done, GoneWith: &del}, Decision{Action: providers.Revert, Reason: NothingToUndo, Why: Why{By: []phases.Address{del}}}},
	} {
		t.Run(row.name, func(t *testing.T) {
			if got := decide(row.f); !sameDecision(got, row.want) {
				t.Errorf("decide = %+v, want %+v", got, row.want)
			}
		})
	}
}

func sameDecision(a, b Decision) bool {
	same := func(x, y []phases.Address) bool {
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	return a.Action == b.Action && a.Reason == b.Reason && a.Needs == b.Needs && same(a.Why.By, b.Why.By) && same(a.Why.After, b.Why.After) &&
		a.Why.Was == b.Why.Was && a.Why.Now == b.Why.Now && a.Why.Detail == b.Why.Detail
}

// TestSavedDecisionAdmits: run --plan refuses a step planned again whose
// fresh decision differs from the saved one; a decision saved on unknown
// inputs, or by a plan without reasons, admits any.
func TestSavedDecisionAdmits(t *testing.T) {
	created := Decision{Action: providers.Create, Reason: NeverRan}
	for _, row := range []struct {
		saved StepPlan
		fresh Decision
		want  bool
	}{
		{StepPlan{Action: providers.Create, ReasonCode: NeverRan}, created, true},
		{StepPlan{Action: providers.Create, ReasonCode: NeverRan}, Decision{Action: providers.Create, Reason: FailedLastTime}, false},
		{StepPlan{Action: providers.Create, ReasonCode: NeverRan}, Decision{Action: providers.Update, Reason: NeverRan}, false},
		{StepPlan{Action: providers.Update, ReasonCode: InputsUnknown}, created, true},
		{StepPlan{Action: providers.Create, ReasonCode: ProviderWaits}, Decision{Action: providers.Drift, Reason: Drifted}, true},
		{StepPlan{Action: providers.Create}, Decision{Action: providers.Drift, Reason: Drifted}, true},
	} {
		if got := admits(&row.saved, row.fresh); got != row.want {
			t.Errorf("saved %s (%s), fresh %s (%s): admits = %v, want %v", row.saved.Action, row.saved.ReasonCode, row.fresh.Action, row.fresh.Reason, got, row.want)
		}
	}
}
