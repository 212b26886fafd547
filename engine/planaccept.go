package engine

import (
	"fmt"
	"strings"

	"github.com/homelab-migrate/migrate/state"
)

// Whether Run accepts a plan: made against this state (a saved plan can
// go stale), naming phases the runbook has, after complete phases.

// StaleError says a saved plan no longer matches the state.
type StaleError struct {
	PlanLineage, StateLineage string
	PlanSerial, StateSerial   uint64
}

func (e *StaleError) Error() string {
	switch {
	case e.PlanLineage != "" && e.StateLineage == "":
		// A state that does not exist has no lineage yet.
		return fmt.Sprintf("the plan was made for a state of lineage %s, and there is no state here yet: "+
			"run it with the state it was made for (--runbook, --state or --backend), or make a new plan", e.PlanLineage)
	case e.PlanLineage != e.StateLineage && e.PlanLineage != "":
		return fmt.Sprintf("the plan was made for another state (lineage %s; this state is lineage %s): "+
			"run it with the state it was made for (--runbook, --state or --backend), or make a new plan", e.PlanLineage, e.StateLineage)
	}
	return fmt.Sprintf("the state changed since the plan was made (serial %d then, %d now): make a new plan", e.PlanSerial, e.StateSerial)
}

// ValidatePlan says whether Run would accept the plan: made against this state,
// naming phases the runbook has, with every earlier phase complete. The
// CLI calls it before showing a plan for confirmation.
func (e *Engine) ValidatePlan(plan *Plan) error {
	return e.check(plan, e.state.Snapshot())
}

func (e *Engine) check(plan *Plan, snap *state.Snapshot) error {
	if plan.Lineage != snap.Lineage && plan.Lineage != "" || plan.Serial != snap.Serial {
		return &StaleError{PlanLineage: plan.Lineage, StateLineage: snap.Lineage, PlanSerial: plan.Serial, StateSerial: snap.Serial}
	}
	snap = e.movedSnapshot(snap)
	for _, pp := range plan.Phases {
		if e.runbook.Phase(pp.Name) == nil {
			return fmt.Errorf("the plan names phase %q, which the runbook no longer has: make a new plan", pp.Name)
		}
	}
	return e.checkEarlierPhases(plan, snap)
}

// CheckOrder refuses, as ValidatePlan would, phases whose earlier phases
// are neither complete nor among them, before anything is planned: no
// provider is asked anything (a plan reads the old VMs, and a refused
// command must leave the world as it was). Unknown phases are left for
// Plan to name.
func (e *Engine) CheckOrder(names []string) error {
	selected, err := e.selectPhases(names)
	if err != nil {
		return nil
	}
	plan := &Plan{}
	for _, ph := range selected {
		plan.Phases = append(plan.Phases, &PhasePlan{Name: ph.Name})
	}
	return e.checkEarlierPhases(plan, e.movedSnapshot(e.state.Snapshot()))
}

// checkEarlierPhases refuses to run a phase whose predecessors are not
// complete, unless they run first in this same plan.
func (e *Engine) checkEarlierPhases(plan *Plan, snap *state.Snapshot) error {
	inPlan := map[string]bool{}
	for _, pp := range plan.Phases {
		ph := e.runbook.Phase(pp.Name)
		if ph == nil {
			continue
		}
		var missing []string
		for _, before := range e.order.Before(ph) {
			if !inPlan[before.Name] && !phaseComplete(before, snap) {
				missing = append(missing, before.Name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("phase %s runs after %s, which %s not complete: run `migrate run --phase %s` first (or --all)",
				ph.Name, strings.Join(missing, ", "), plural(len(missing), "is", "are"), missing[0])
		}
		inPlan[pp.Name] = true
	}
	return nil
}
