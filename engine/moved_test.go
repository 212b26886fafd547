package engine_test

import (
	"context"
	"testing"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
)

// A chain of moved blocks (a -> b, b -> c) carries a's record to c in one
// move; a saved plan's moves are part of its contract.
func TestMovedChain(t *testing.T) {
	h := newHarness(t)
	b := newRB()
	p := b.phase("main")
	b.step(p, "a")
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	b2 := newRB()
	p2 := b2.phase("main")
	s := b2.step(p2, "c")
	s.Config = value("a") // the same inputs as a's
	b2.r.Moved = []*phases.Moved{{From: addr("a"), To: addr("b")}, {From: addr("b"), To: addr("c")}}

	e, st := h.open(b2.r)
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	if len(plan.Moved) != 1 || plan.Moved[0] != (engine.Move{From: addr("a"), To: addr("c")}) {
		t.Fatalf("plan.Moved = %+v, want a to c", plan.Moved)
	}
	if sp := plan.Phases[0].Steps[0]; sp.MovedFrom == nil || *sp.MovedFrom != addr("a") {
		t.Fatalf("c's plan moved_from = %v, want a", sp.MovedFrom)
	}
	// The runbook's moves changed since the plan: a saved plan is refused.
	saved := *plan
	saved.Moved = nil
	if err := e.CheckSavedPlan(context.Background(), &saved); err == nil {
		t.Error("a saved plan without the runbook's moves was accepted")
	}
	if err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	snap := st.Snapshot()
	if snap.Steps["fake_step.a"] != nil || snap.Steps["fake_step.b"] != nil || snap.Steps["fake_step.c"] == nil {
		t.Fatalf("steps after the run: %v, want c only", snap.Steps)
	}
	if rec := snap.Steps["fake_step.c"]; rec.Attempts < 1 || rec.Addr != addr("c") {
		t.Fatalf("c's record = %+v", rec)
	}
}
