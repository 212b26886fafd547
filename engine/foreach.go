package engine

import (
	"sort"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
)

// removedInstances lists the instances of the phase's for_each steps
// that the runbook no longer has (their key left the map) and whose
// record still holds an effect to undo: each is the step as declared,
// addressed with the removed key, so that the rollback's revert path
// undoes it with its provider and its revert data.
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
		if err != nil || a.Key == "" || present[a] || !needsRevert(rec) {
			continue
		}
		if t := declared[a.Base()]; t != nil {
			s := *t
			s.Addr = a
			out = append(out, &s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr.String() < out[j].Addr.String() })
	return out
}

// planRemoved plans the revert of instances whose key left the map.
func (e *Engine) planRemoved(ph *phases.Phase, snap *state.Snapshot) []*StepPlan {
	var out []*StepPlan
	for _, s := range e.removedInstances(ph, snap) {
		rec := snap.Steps[s.Addr.String()]
		_, gone := e.discarders(s.Addr, snapshotLookup(snap))
		d := decide(stepFacts{Rollback: true, KeyRemoved: true, Rec: rec, GoneWith: gone})
		if d.Reason == KeyRemoved {
			d.Why.By = []phases.Address{s.Addr.Base()}
		}
		out = append(out, &StepPlan{Addr: s.Addr, Action: d.Action, Status: rec.Status, ReasonCode: d.Reason, Why: d.Why})
	}
	return out
}

// revertRemoved reverts, at the start of a phase's run, the instances
// the plan planned for revert because their key left the map, in reverse
// dependency order.
func (e *Engine) revertRemoved(pr *phaseRun, r *stepRunner, ph *phases.Phase) error {
	var todo []*phases.Step
	for _, s := range e.removedInstances(ph, e.state.Snapshot()) {
		if sp := r.planned[s.Addr]; sp != nil && (sp.ReasonCode == KeyRemoved || sp.ReasonCode == NothingToUndo) {
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
