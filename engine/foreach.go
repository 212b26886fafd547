package engine

import (
	"sort"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
)

// removedInstances lists the records the runbook no longer has a step
// for that are still to undo and that it says how to undo: an instance
// of one of the phase's for_each steps whose key left the map, and a
// step of a group call instance whose key left the call's for_each
// (groupGone). Each is the step as declared (Phase.ForEach: the block,
// or for a group call with for_each each step of the group addressed
// group.CALL.TYPE.NAME, without the call's key), addressed as the
// record is, so that the rollback's revert path undoes it with its
// provider and its revert data.
func (e *Engine) removedInstances(ph *phases.Phase, snap *state.Snapshot) []*phases.Step {
	if ph == nil || len(ph.ForEach) == 0 {
		return nil
	}
	declared := make(map[phases.Address]*phases.Step, len(ph.ForEach))
	for _, s := range ph.ForEach {
		declared[s.Addr] = s
	}
	present := make(map[phases.Address]bool, len(ph.Steps))
	for _, s := range ph.Steps {
		present[s.Addr] = true
	}
	var out []*phases.Step
	for key, rec := range snap.Steps {
		a, err := phases.ParseAddress(key)
		if err != nil || present[a] || !needsRevert(rec) {
			continue
		}
		// A call's declaration of its step, without the call's key.
		keyless := phases.Address{Group: a.Group, Type: a.Type, Name: a.Name}
		var t *phases.Step
		switch {
		case e.groupGone(a):
			t = declared[keyless]
		case a.Key != "":
			if t = declared[a.Base()]; t == nil && a.GroupKey != "" {
				t = declared[keyless]
			}
		}
		if t == nil {
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
		out = append(out, &s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr.String() < out[j].Addr.String() })
	return out
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
	return r == KeyRemoved || r == GroupRemoved || r == NothingToUndo
}

// planRemoved plans the revert of instances whose key left the map, and
// of the steps of group call instances gone.
func (e *Engine) planRemoved(ph *phases.Phase, snap *state.Snapshot) []*StepPlan {
	var out []*StepPlan
	for _, s := range e.removedInstances(ph, snap) {
		rec := snap.Steps[s.Addr.String()]
		_, gone := e.discarders(s.Addr, snapshotLookup(snap))
		d := decide(stepFacts{Rollback: true, KeyRemoved: true, GroupRemoved: e.groupGone(s.Addr), Rec: rec, GoneWith: gone})
		if d.Reason == KeyRemoved || d.Reason == GroupRemoved {
			d.Why.By = []phases.Address{s.Addr.Base()}
		}
		out = append(out, &StepPlan{Addr: s.Addr, Group: s.Addr.GroupPrefix(), Action: d.Action, Status: rec.Status, ReasonCode: d.Reason, Why: d.Why})
	}
	return out
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
