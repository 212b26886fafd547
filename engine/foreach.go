package engine

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
)

// removedInstances lists the records of phase ph the runbook no longer
// has a step for that are still to undo and that it knows how to undo:
// an instance of one of the phase's for_each steps whose key left the
// map, a step of a group call instance whose key left the call's
// for_each (groupGone), and a step the runbook has in no form any more
// (removedStep: its block, or its group call, deleted; or renamed
// without a moved block). The first two are the step as declared
// (Phase.ForEach: the block, or for a group call with for_each each
// step of the group addressed group.CALL.TYPE.NAME, without the call's
// key), the last the step as its record knows it; each is addressed as
// the record is, so that the rollback's revert path undoes it with its
// provider and its revert data.
func (e *Engine) removedInstances(ph *phases.Phase, snap *state.Snapshot) []*phases.Step {
	list, _ := e.removed(ph, snap)
	out := make([]*phases.Step, len(list))
	for i, r := range list {
		out[i] = r.step
	}
	return out
}

// removal is a step removedInstances lists, with why the runbook no
// longer has it (KeyRemoved, GroupRemoved, StepRemoved).
type removal struct {
	step   *phases.Step
	reason ReasonCode
}

// leftRecord is a record still to undo whose step the runbook no longer
// has and that no provider configured now may undo (removedStep).
type leftRecord struct {
	Addr  phases.Address
	Phase string
	Why   error
}

// removed is removedInstances, each with its reason, and the records it
// leaves (leftRecord).
func (e *Engine) removed(ph *phases.Phase, snap *state.Snapshot) ([]removal, []leftRecord) {
	if ph == nil {
		return nil, nil
	}
	declared := make(map[phases.Address]*phases.Step, len(ph.ForEach))
	for _, s := range ph.ForEach {
		declared[s.Addr] = s
	}
	present := make(map[phases.Address]bool, len(ph.Steps))
	for _, s := range ph.Steps {
		present[s.Addr] = true
	}
	var out []removal
	var left []leftRecord
	for _, rec := range snap.Steps {
		a := rec.Addr // the key's (the state checks it on load)
		if present[a] || !needsRevert(rec) || e.letGo(a) != nil {
			continue
		}
		// A call's declaration of its step, without the call's key.
		keyless := phases.Address{Group: a.Group, Type: a.Type, Name: a.Name}
		var t *phases.Step
		gone := e.groupGone(a)
		switch {
		case gone:
			t = declared[keyless]
		case a.Key != "":
			if t = declared[a.Base()]; t == nil && a.GroupKey != "" {
				t = declared[keyless]
			}
		}
		if t == nil {
			if rec.Phase != ph.Name || e.steps[a] != nil {
				continue // another phase's, or moved to another phase
			}
			s, err := e.removedStep(a, rec, snap)
			if err != nil {
				left = append(left, leftRecord{Addr: a, Phase: ph.Name, Why: err})
				continue
			}
			out = append(out, removal{s, StepRemoved})
			continue
		}
		s := *t
		s.Addr = a
		if a.GroupKey != "" && t.Addr.GroupKey == "" {
			// The call's declaration, made for no instance or for
			// another: the steps of the call it names are this
			// instance's, and its attributes are not (another
			// instance's inputs): the revert data says what to undo.
			s.DependsOn, s.Discards = inInstance(t.DependsOn, a), inInstance(t.Discards, a)
			s.Config = phases.Static(cty.DynamicVal)
		}
		r := removal{&s, KeyRemoved}
		if gone {
			r.reason = GroupRemoved
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].step.Addr.String() < out[j].step.Addr.String() })
	sort.Slice(left, func(i, j int) bool { return left[i].Addr.String() < left[j].Addr.String() })
	return out, left
}

// removedStep is the step of a record whose step the runbook has in no
// form any more, as Terraform destroys a resource deleted from its
// configuration: run by the provider that ran it (its record says
// which), with no attributes (its revert data says what to undo). It is
// undone before every step of its phase that ended before it started:
// the reverse of the order things were done in, the one order known to
// be safe without the dependencies its block declared.
func (e *Engine) removedStep(a phases.Address, rec *state.StepRecord, snap *state.Snapshot) (*phases.Step, error) {
	prov, err := e.recordProvider(a, rec)
	if err != nil {
		return nil, err
	}
	s := &phases.Step{Addr: a, Phase: rec.Phase, Provider: prov, Config: phases.Static(cty.DynamicVal)}
	for _, other := range snap.Steps {
		d := other.Addr
		if d == a || other.Phase != rec.Phase {
			continue
		}
		// Ended before it started: an interval order, so never a cycle,
		// and every step it depended on when it ran is among them.
		if rec.StartedAt != nil && other.FinishedAt != nil && other.FinishedAt.Before(*rec.StartedAt) {
			s.DependsOn = append(s.DependsOn, d)
		}
	}
	sort.Slice(s.DependsOn, func(i, j int) bool { return s.DependsOn[i].String() < s.DependsOn[j].String() })
	return s, nil
}

// recordProvider is the provider configuration that undoes a record
// whose step the runbook no longer has: the one that ran it. Never
// another, not even the only one of its type configured now: it may be
// another machine's. A record of an older migrate does not say (a run
// that passes over its step unchanged fills it in: rehash).
func (e *Engine) recordProvider(a phases.Address, rec *state.StepRecord) (string, error) {
	if p := e.providers[rec.Provider]; p != nil {
		if _, ok := p.Schema().StepTypes[a.Type]; ok {
			return rec.Provider, nil
		}
	}
	if rec.Provider != "" {
		return "", fmt.Errorf("the provider that ran it, %s, is no longer configured", rec.Provider)
	}
	var runners []string // only to say so
	for _, key := range slices.Sorted(maps.Keys(e.providers)) {
		if _, ok := e.providers[key].Schema().StepTypes[a.Type]; ok {
			runners = append(runners, key)
		}
	}
	return "", fmt.Errorf("its record, written by an older migrate, does not say which provider ran it (configured now for %s: %s)", a.Type, orNone(runners))
}

// orNone lists names, or says there are none.
func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// leftDiags warns, in a plan, of the records of the phases planned that
// are still to undo but that no provider configured now may undo (left,
// as planRemoved found them), and, when it plans every phase, of records
// of phases the runbook no longer has: nothing undoes them.
func (e *Engine) leftDiags(left []leftRecord, all bool, snap *state.Snapshot) phases.Diagnostics {
	var diags phases.Diagnostics
	for _, l := range left {
		diags = append(diags, phases.Diagnostic{Severity: phases.Warning, Summary: "Step Left Undone",
			Detail: fmt.Sprintf("%s (phase %s) is no longer in the runbook and its record says it is still to undo, but %v: nothing will undo it. Its record is kept: put the step back (renamed? a moved block from its old address carries its record), or its provider block, to have it undone.", l.Addr, l.Phase, l.Why)})
	}
	if !all {
		return diags
	}
	gone := map[string][]string{}
	for key, rec := range snap.Steps {
		if e.runbook.Phase(rec.Phase) == nil && needsRevert(rec) && e.letGo(rec.Addr) == nil {
			gone[rec.Phase] = append(gone[rec.Phase], key)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(gone)) {
		steps := gone[name]
		sort.Strings(steps)
		diags = append(diags, phases.Diagnostic{Severity: phases.Warning, Summary: "Phase No Longer In The Runbook",
			Detail: fmt.Sprintf("The state holds steps of phase %s, which the runbook no longer has, that are still to undo: %s. Nothing will undo them; their records are kept. Put the phase back to run or roll it back.", name, strings.Join(steps, ", "))})
	}
	return diags
}

// groupGone: a is a step of a group call instance (group.CALL["KEY"])
// that the runbook no longer has: the key left the call's for_each.
func (e *Engine) groupGone(a phases.Address) bool {
	return a.GroupKey != "" && !e.groupInstances[a.GroupPrefix()]
}

// inInstance is list with the steps of a's group call given a's key: a
// step of a group refers only to steps of its own call instance, and a
// call's declaration names them without a key or with another
// instance's.
func inInstance(list []phases.Address, a phases.Address) []phases.Address {
	if len(list) == 0 {
		return list
	}
	out := make([]phases.Address, len(list))
	for i, d := range list {
		if d.Group == a.Group {
			d.GroupKey = a.GroupKey
		}
		out[i] = d
	}
	return out
}

// removedReason: a plan's reason for reverting a step the runbook no
// longer has (its key, or its group call instance, left the map).
func removedReason(r ReasonCode) bool {
	return r == KeyRemoved || r == GroupRemoved || r == StepRemoved || r == NothingToUndo
}

// planRemoved plans the revert of instances whose key left the map, of
// the steps of group call instances gone, and of steps the runbook no
// longer has; it returns the records of the phase no provider may undo.
func (e *Engine) planRemoved(ph *phases.Phase, snap *state.Snapshot) ([]*StepPlan, []leftRecord) {
	var out []*StepPlan
	list, left := e.removed(ph, snap)
	for _, r := range list {
		s := r.step
		rec := snap.Steps[s.Addr.String()]
		_, gone := e.discarders(s.Addr, snapshotLookup(snap))
		d := decide(stepFacts{Rollback: true, Removed: r.reason, Rec: rec, GoneWith: gone})
		if d.Reason == KeyRemoved || d.Reason == GroupRemoved {
			d.Why.By = []phases.Address{s.Addr.Base()}
		}
		out = append(out, &StepPlan{Addr: s.Addr, Group: s.Addr.GroupPrefix(), Action: d.Action, Status: rec.Status, ReasonCode: d.Reason, Why: d.Why})
	}
	return out, left
}

// revertRemoved reverts, at the start of a phase's run, the instances
// the plan planned for revert because their key (or their group call
// instance) left the map, in reverse dependency order.
func (e *Engine) revertRemoved(pr *phaseRun, r *stepRunner, ph *phases.Phase) error {
	var todo []*phases.Step
	for _, s := range e.removedInstances(ph, e.state.Snapshot()) {
		if sp := r.planned[s.Addr]; sp != nil && removedReason(sp.ReasonCode) {
			todo = append(todo, s)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	w, err := pr.walk(r.stop, r, newStepGraph(todo).reversed(), r.revert)
	if err != nil {
		return err
	}
	if len(w.failed) > 0 {
		return pr.failed(&PhaseError{Phase: ph.Name, Failed: w.failed, Skipped: w.skipped})
	}
	if w.interrupted {
		return pr.interrupted()
	}
	return nil
}

// withRemoved is the phase's steps and the instances whose key left the
// map that are still to undo: a rollback undoes those too.
func (e *Engine) withRemoved(ph *phases.Phase, snap *state.Snapshot) []*phases.Step {
	removed := e.removedInstances(ph, snap)
	if len(removed) == 0 {
		return ph.Steps
	}
	return append(append(make([]*phases.Step, 0, len(ph.Steps)+len(removed)), ph.Steps...), removed...)
}
