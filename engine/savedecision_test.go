package engine_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/engine"
)

// TestSavedPlanWhoseDecisionDiffersIsRefused: a saved plan keeps each
// step's decision (action and reason code); a step run plans again once
// its inputs are known is refused, nothing applied, when the decision
// made just before it would run differs from the saved one (here a plan
// that says the step failed last time, when it never ran).
func TestSavedPlanWhoseDecisionDiffersIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := waiting("node", "config", "at-")
	e, st := h.open(b.r)
	plan := mustPlan(t, e)
	st.Close()
	path := filepath.Join(t.TempDir(), "plan.json")
	if err := engine.WritePlan(path, plan); err != nil {
		t.Fatal(err)
	}
	saved, err := engine.ReadPlan(path)
	if err != nil {
		t.Fatal(err)
	}
	sp := stepPlan(t, saved, "config")
	if sp.ReasonCode != engine.NeverRan || len(sp.KnownAfter) == 0 {
		t.Fatalf("the saved plan keeps config as %s (%q), known after %v", sp.Action, sp.ReasonCode, sp.KnownAfter)
	}
	sp.ReasonCode = engine.FailedLastTime
	e, st = h.open(b.r)
	defer st.Close()
	err = e.Run(context.Background(), context.Background(), saved, engine.RunOptions{SavedPlan: true})
	var pe *engine.PhaseError
	if !errors.As(err, &pe) || len(pe.Failed) != 1 || pe.Failed[0] != addr("config") {
		t.Fatalf("run: %v", err)
	}
	if n := h.fake.Applied("fake_step.config"); n != 0 {
		t.Errorf("config applied %d times", n)
	}
	rec, _ := st.Step(addr("config"))
	for _, want := range []string{"stale for fake_step.config", "failed_last_time", "never_ran", "make a new plan"} {
		if !strings.Contains(rec.LastError, want) {
			t.Errorf("error %q does not say %q", rec.LastError, want)
		}
	}
}
