package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// programs names the programs the providers of the selected phases run
// in (providers.ProgramRunner), once per file, sorted: a plan says what
// its reviewer trusts with the runbook's secrets. The providers that
// undo what the phases no longer have (withRemoved: a deleted step's, by
// its record) count too: a run or rollback may start them for that
// alone. A program refused (a sum that differs, a file others may write)
// is an error of the plan, said before anything runs.
func (e *Engine) programs(selected []*phases.Phase, snap *state.Snapshot) ([]providers.Program, phases.Diagnostics) {
	used := map[string]bool{}
	for _, ph := range selected {
		for _, s := range slices.Concat(e.withRemoved(ph, snap), ph.Checks) {
			used[s.Provider] = true
		}
	}
	var out []providers.Program
	var diags phases.Diagnostics
	for _, key := range sortedKeys(used) {
		pr, ok := e.providers[key].(providers.ProgramRunner)
		if !ok {
			continue
		}
		p, err := pr.Program()
		if err != nil {
			diags = append(diags, phases.Errorf("Provider Program Refused", "The program of provider %s cannot be run: %v.", key, err)...)
			continue
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b providers.Program) int { return strings.Compare(a.Path, b.Path) })
	return out, diags
}

// CheckPrograms refuses a saved plan made with other provider programs
// than those its run would start now: the plan named them to the person
// who reviewed it.
func (e *Engine) CheckPrograms(plan *Plan) error {
	var names []string
	for _, pp := range plan.Phases {
		names = append(names, pp.Name)
	}
	selected, err := e.selectPhases(names)
	if err != nil {
		return err
	}
	snap, _, _ := e.moves(e.state.Snapshot())
	now, diags := e.programs(selected, snap)
	if diags.HasErrors() {
		return diags.Err()
	}
	if !slices.Equal(now, plan.Programs) {
		return fmt.Errorf("the plan was made with the provider programs %s, and the run would start %s: make a new plan, and review it", listPrograms(plan.Programs), listPrograms(now))
	}
	return nil
}

// listPrograms names programs for an error: path and sha256.
func listPrograms(list []providers.Program) string {
	if len(list) == 0 {
		return "(none)"
	}
	var s []string
	for _, p := range list {
		s = append(s, fmt.Sprintf("%s (sha256 %s)", p.Path, p.SHA256))
	}
	return strings.Join(s, ", ")
}
