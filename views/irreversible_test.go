package views_test

import (
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/providers"
)

// TestPlanListsIrreversible: each phase of a plan ends with the steps a
// rollback will not undo, and why.
func TestPlanListsIrreversible(t *testing.T) {
	v, out, _ := newView()
	v.Plan(&engine.Plan{Phases: []*engine.PhasePlan{{Name: "B",
		Steps: []*engine.StepPlan{
			{Addr: addr("exec.b"), Action: providers.Create, Irreversible: "no revert command"},
			{Addr: addr("exec.c"), Action: providers.Create},
		},
	}}})
	want := "  Rollback will NOT be able to undo:\n    ! exec.b: no revert command\n\n"
	if got := out.String(); !strings.Contains(got, want) || strings.Contains(got, "! exec.c") {
		t.Errorf("plan lacks %q (or lists exec.c):\n%s", want, got)
	}
}
