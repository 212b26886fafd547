package engine_test

import (
	"context"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/fake"
	"github.com/homelab-migrate/migrate/views"
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

// TestMovedKeepsTheWorlds: the VM and its config renamed by moved blocks
// (as a runbook that puts them in a group does) are the same VM and
// config: once the run made the moves, the bootstrap's record, kept with
// the worlds of its dependencies under their old names, still holds, and
// nothing runs again.
func TestMovedKeepsTheWorlds(t *testing.T) {
	t.Parallel()
	h, b, w := replacedWorld(t)
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	b2 := newRB()
	p := b2.phase("platform")
	mkNamed := func(name, was string, deps ...string) {
		s := mkStep(p, name, value(was), deps...)
		p.Steps = append(p.Steps, s)
	}
	mkNamed("machine", "vm")
	mkNamed("cfg", "config", "machine")
	mkNamed("bootstrap", "bootstrap", "cfg")
	b2.r.Moved = []*phases.Moved{{From: addr("vm"), To: addr("machine")}, {From: addr("config"), To: addr("cfg")}}
	if err := h.run(b2.r); err != nil {
		t.Fatal(err)
	}
	e, st := h.open(b2.r)
	defer st.Close()
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	for _, name := range []string{"machine", "cfg", "bootstrap"} {
		if sp := stepPlanNamed(t, plan, name); sp.Action != providers.NoOp {
			t.Errorf("%s after the moves: %s %q", name, sp.Action, views.Because(sp.ReasonCode, sp.Why))
		}
	}
	if w.count("vm")+w.count("machine") != 1 || w.count("config")+w.count("cfg") != 1 || w.count("bootstrap") != 1 {
		t.Errorf("applies: %v, want each step once, before the moves", w.applied)
	}
}

// TestMovedNameWrittenOut: a step whose object took its step's name (no
// name attribute), moved to an address where it must say that name (a
// step of a group), has the same inputs: unchanged. Another name is a
// change.
func TestMovedNameWrittenOut(t *testing.T) {
	t.Parallel()
	named := func(v string, name cty.Value) phases.Evaluator {
		return phases.Static(cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal(v), "name": name}))
	}
	h := newHarness(t)
	h.fake.ReadFn = func(_ context.Context, req providers.ReadRequest) providers.ReadResponse {
		return providers.PresentIfPrior(req)
	}
	b := newRB()
	p := b.phase("main")
	p.Steps = append(p.Steps, mkStep(p, "talos", named("vm", cty.NullVal(cty.String))))
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want providers.Action
	}{{"talos", providers.NoOp}, {"other", providers.Update}} {
		b2 := newRB()
		p2 := b2.phase("main")
		s := mkStep(p2, "vm", named("vm", cty.StringVal(tc.name)))
		s.Addr = phases.Address{Group: "node", Type: fake.StepType, Name: "vm"}
		p2.Steps = append(p2.Steps, s)
		b2.r.Moved = []*phases.Moved{{From: addr("talos"), To: s.Addr}}
		e, st := h.open(b2.r)
		plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
		st.Close()
		if diags.HasErrors() {
			t.Fatal(diags.Err())
		}
		if sp := plan.Phases[0].Steps[0]; sp.Action != tc.want {
			t.Errorf("name = %q: %s %q, want %s", tc.name, sp.Action, views.Because(sp.ReasonCode, sp.Why), tc.want)
		}
	}
}
