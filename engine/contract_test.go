package engine_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/engine"
)

// TestSavedPlanIsAContract: a saved plan run against a runbook that
// gained a step, lost one and changed another is refused before any step
// runs, naming all three; the same plan against the runbook it was made
// of runs.
func TestSavedPlanIsAContract(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("p")
	b.step(p, "a")
	b.step(p, "b", "a")
	b.step(p, "c", "b")
	e, st := h.open(b.r)
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	st.Close()
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	path := filepath.Join(t.TempDir(), "p.json")
	if err := engine.WritePlan(path, plan); err != nil {
		t.Fatal(err)
	}
	saved, err := engine.ReadPlan(path)
	if err != nil {
		t.Fatal(err)
	}

	edited := newRB()
	q := edited.phase("p")
	edited.step(q, "a")
	q.Steps = append(q.Steps, mkStep(q, "b", value("not what was reviewed"), "a"))
	edited.step(q, "d", "b")
	e, st = h.open(edited.r)
	err = e.Run(context.Background(), context.Background(), saved, engine.RunOptions{SavedPlan: true})
	st.Close()
	var ce *engine.ContractError
	if !errors.As(err, &ce) {
		t.Fatalf("run of a saved plan whose runbook changed: %v", err)
	}
	for _, want := range []string{
		"fake_step.b: its attributes changed",
		"fake_step.c is in the plan but no longer in phase p",
		"fake_step.d was added to phase p since the plan was made",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q:\n%v", want, err)
		}
	}
	if n := len(h.fake.Order()); n != 0 {
		t.Errorf("%d steps were applied before the refusal", n)
	}

	e, st = h.open(b.r)
	defer st.Close()
	if err := e.Run(context.Background(), context.Background(), saved, engine.RunOptions{SavedPlan: true}); err != nil {
		t.Errorf("the saved plan against its own runbook: %v", err)
	}
}
