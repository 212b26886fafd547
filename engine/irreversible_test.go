package engine_test

import (
	"context"
	"testing"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/providers"
)

// TestPlanSaysWhatCannotBeUndone: the plan lists, per phase, the steps
// that will run and that a rollback will not undo, with the provider's
// reason; a step that will not run, or a check, is not listed.
func TestPlanSaysWhatCannotBeUndone(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("p")
	b.step(p, "keep")
	b.step(p, "oneway")
	b.step(p, "undoable")
	b.check(p, "probe", "after")
	q := b.phase("q")
	b.step(q, "later")
	h.fake.PlanFn = func(ctx context.Context, req providers.PlanRequest) providers.PlanResponse {
		if req.Addr.Name == "undoable" {
			return providers.PlanResponse{}
		}
		return providers.PlanResponse{Irreversible: "cannot be undone: " + req.Addr.Name}
	}
	if err := h.run(b.r, "p"); err != nil {
		t.Fatal(err)
	}
	// p is done: nothing will run there, so nothing is listed.
	e, st := h.open(b.r)
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	st.Close()
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	if irr := plan.Phase("p").Irreversible(); len(irr) != 0 {
		t.Errorf("phase p has nothing to run, yet lists %v", irr)
	}
	irr := plan.Phase("q").Irreversible()
	if len(irr) != 1 || irr[0].Addr != addr("later") || irr[0].Reason != "cannot be undone: later" {
		t.Errorf("phase q lists %+v, want fake_step.later with its reason", irr)
	}

	// Before anything ran: oneway and keep, not undoable nor the check.
	h2 := newHarness(t)
	h2.fake.PlanFn = h.fake.PlanFn
	e, st = h2.open(b.r)
	defer st.Close()
	plan, _ = e.Plan(context.Background(), engine.PlanOptions{Phases: []string{"p"}})
	var got []string
	for _, x := range plan.Phase("p").Irreversible() {
		got = append(got, x.Addr.Name)
	}
	if len(got) != 2 || got[0] != "keep" || got[1] != "oneway" {
		t.Errorf("phase p lists %v, want [keep oneway]", got)
	}
}
