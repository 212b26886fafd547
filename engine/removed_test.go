package engine_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// planned is the plan's steps by address.
func planned(plan *engine.Plan) map[string]*engine.StepPlan {
	out := map[string]*engine.StepPlan{}
	for _, pp := range plan.Phases {
		for _, sp := range pp.Steps {
			out[sp.Addr.String()] = sp
		}
	}
	return out
}

// TestStepRemovedFromTheRunbookIsReverted: a done step whose block is
// deleted, or renamed without a moved block, is planned for revert ("no
// longer in the runbook"), as Terraform plans the destroy of a resource
// deleted from its configuration, and the run reverts it with its
// record's provider; the renamed step is made anew. Before, its record
// was forgotten: the plan said nothing, and no rollback undid it.
func TestStepRemovedFromTheRunbookIsReverted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	before := newRB()
	p := before.phase("p")
	before.step(p, "a")
	before.step(p, "b", "a")
	before.step(p, "c", "b")
	if err := h.run(before.r); err != nil {
		t.Fatal(err)
	}
	after := newRB()
	p = after.phase("p")
	after.step(p, "a")
	after.step(p, "c2", "a") // c renamed, no moved block; b deleted
	e, st := h.open(after.r)
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() || len(diags) != 0 {
		t.Fatalf("plan: %v", diags)
	}
	got := planned(plan)
	for _, a := range []string{"fake_step.b", "fake_step.c"} {
		if sp := got[a]; sp == nil || sp.Action != providers.Revert || sp.ReasonCode != engine.StepRemoved {
			t.Errorf("%s planned %+v, want a revert for step_removed", a, sp)
		}
	}
	if sp := got["fake_step.c2"]; sp == nil || sp.Action != providers.Create {
		t.Errorf("fake_step.c2 planned %+v, want create", sp)
	}
	if sp := got["fake_step.a"]; sp == nil || sp.Action != providers.NoOp {
		t.Errorf("fake_step.a planned %+v, want unchanged", sp)
	}
	if err := e.CheckSavedPlan(context.Background(), plan); err != nil {
		t.Fatalf("the plan's reverts were refused as a saved plan: %v", err)
	}
	if err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	for a, want := range map[string]int{"fake_step.b": 1, "fake_step.c": 1, "fake_step.a": 0} {
		if n := h.fake.Reverted(a); n != want {
			t.Errorf("%s reverted %d times, want %d", a, n, want)
		}
	}
	// c ran after b, which ran after a: undone in the reverse order.
	var reverted []string
	for _, ev := range h.events {
		if ev.Kind == engine.StepReverted {
			reverted = append(reverted, ev.Addr.String())
		}
	}
	if !slices.Equal(reverted, []string{"fake_step.c", "fake_step.b"}) {
		t.Errorf("reverted %q, want c then b (the reverse of the order they ran in)", reverted)
	}
	if h.status("c2") != state.Done || h.status("b") != state.Reverted {
		t.Errorf("after the run: c2 %s, b %s", h.status("c2"), h.status("b"))
	}
	e, st = h.open(after.r)
	for _, sp := range mustPlan(t, e).Phases[0].Steps {
		if sp.Action != providers.NoOp {
			t.Errorf("once reverted, %s is planned %s (%s)", sp.Addr, sp.Action, sp.ReasonCode)
		}
	}
	st.Close()
}

// TestRollbackUndoesAStepRemovedFromTheRunbook: a rollback of the phase
// undoes a step the runbook no longer has, before the steps that ran
// before it.
func TestRollbackUndoesAStepRemovedFromTheRunbook(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	before := newRB()
	p := before.phase("p")
	before.step(p, "a")
	before.step(p, "b", "a")
	if err := h.run(before.r); err != nil {
		t.Fatal(err)
	}
	after := newRB()
	after.step(after.phase("p"), "a")
	rp, err := h.rollback(after.r)
	if err != nil {
		t.Fatal(err)
	}
	var reverts []string
	for _, r := range rp.Phases[0].Revert {
		reverts = append(reverts, r.Addr.String())
	}
	if !slices.Equal(reverts, []string{"fake_step.b", "fake_step.a"}) {
		t.Errorf("the rollback plan undoes %q, want b then a", reverts)
	}
	for _, a := range []string{"fake_step.a", "fake_step.b"} {
		if n := h.fake.Reverted(a); n != 1 {
			t.Errorf("%s reverted %d times, want 1", a, n)
		}
	}
}

// TestRemovedStepUndoneByTheProviderThatRanIt: with two configurations
// of a provider type, a removed step is undone by the one its record
// names, never the other (it may be another machine's); a record of an
// older migrate, which names none, is left with a warning that says what
// to do, and the rollback lists it among what it cannot undo.
func TestRemovedStepUndoneByTheProviderThatRanIt(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	two := func(steps ...string) *phases.Runbook {
		b := newRB()
		b.r.Providers = append(b.r.Providers, &phases.ProviderConfig{Type: "fake", Name: "second"})
		p := b.phase("p")
		b.step(p, "keep")
		for _, n := range steps {
			b.step(p, n).Provider = "fake.second"
		}
		return b.r
	}
	if err := h.run(two("x", "old")); err != nil {
		t.Fatal(err)
	}
	// The record of old as an older migrate left it: no provider.
	if p := h.record(addr("old")).Provider; p != "fake.second" {
		t.Fatalf("the record of old names the provider %q, want fake.second", p)
	}
	h.edit("old", func(rec *state.StepRecord) { rec.Provider = "" })

	e, st2 := h.open(two())
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	got := planned(plan)
	if sp := got["fake_step.x"]; sp == nil || sp.Action != providers.Revert || sp.ReasonCode != engine.StepRemoved {
		t.Errorf("fake_step.x planned %+v, want a revert for step_removed", sp)
	}
	if sp := got["fake_step.old"]; sp != nil {
		t.Errorf("fake_step.old planned %+v: its record does not say which provider ran it", sp)
	}
	if diags.HasErrors() || len(diags) != 1 || diags[0].Summary != "Step Left Undone" ||
		!strings.Contains(diags[0].Detail, "fake_step.old") || !strings.Contains(diags[0].Detail, "fake.default, fake.second") {
		t.Fatalf("plan diagnostics %v, want one warning that fake_step.old is left, naming both providers", diags)
	}
	if err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	st2.Close()
	if n := h.fake.Reverted("fake_step.x"); n != 1 {
		t.Errorf("fake_step.x reverted %d times, want 1", n)
	}
	if n := h.fake.Reverted("fake_step.old"); n != 0 {
		t.Errorf("fake_step.old reverted %d times, want none", n)
	}
	if h.status("x") != state.Reverted || h.status("old") != state.Done {
		t.Errorf("after the run: x %s, old %s", h.status("x"), h.status("old"))
	}
	// Its provider's block deleted too: x is reverted, old is still left.
	rp, err := h.rollback(newRB().phaseWith("p", "keep"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(rp.Irreversible(), addr("old")) {
		t.Errorf("the rollback plan's irreversible steps %v lack fake_step.old", rp.Irreversible())
	}
	if n := h.fake.Reverted("fake_step.old"); n != 0 {
		t.Errorf("fake_step.old reverted %d times by the rollback, want none", n)
	}
}

// phaseWith is a runbook of one phase of the steps named.
func (b *rb) phaseWith(name string, steps ...string) *phases.Runbook {
	p := b.phase(name)
	for _, s := range steps {
		b.step(p, s)
	}
	return b.r
}

// TestOlderRecordLearnsItsProvider: a done record of an older migrate,
// which does not name its provider, is given it by the first run that
// passes over its step unchanged: removed later, it can be undone.
func TestOlderRecordLearnsItsProvider(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := newRB().phaseWith("p", "a")
	if err := h.run(r); err != nil {
		t.Fatal(err)
	}
	h.edit("a", func(rec *state.StepRecord) { rec.Provider = "" })
	// A step added: the phase runs again, and passes over a.
	if err := h.run(newRB().phaseWith("p", "a", "b")); err != nil {
		t.Fatal(err)
	}
	if n := h.fake.Applied("fake_step.a"); n != 1 {
		t.Fatalf("fake_step.a applied %d times, want once", n)
	}
	if p := h.record(addr("a")).Provider; p != "fake.default" {
		t.Errorf("the record names the provider %q after a run passed over it, want fake.default", p)
	}
}

// TestRemovedBlockLetsTheRecordGo: a removed block with revert = false
// lets the record of a deleted step go, and of every step of a deleted
// group call: the plan shows it and reverts nothing, run writes it (the
// record keeps its history, loses its revert data, says who let it go),
// and no rollback undoes the step after that.
func TestRemovedBlockLetsTheRecordGo(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	before := newRB()
	p := before.phase("p")
	before.step(p, "a")
	before.step(p, "b", "a")
	groupSteps(before, p, "x")
	if err := h.run(before.r); err != nil {
		t.Fatal(err)
	}
	after := newRB()
	after.step(after.phase("p"), "a")
	after.r.Removed = []*phases.Removed{
		{From: addr("b"), Range: phases.Range{Filename: "main.hcl", StartLine: 7}},
		{From: phases.Address{Group: "svc"}, Call: true, Range: phases.Range{Filename: "main.hcl", StartLine: 11}},
		{From: addr("after"), Revert: true, Range: phases.Range{Filename: "main.hcl", StartLine: 15}},
	}
	e, st := h.open(after.r)
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if len(diags) != 0 {
		t.Fatalf("plan: %v", diags)
	}
	var letGo []string
	for _, f := range plan.LetGo {
		letGo = append(letGo, f.Addr.String()+" "+f.Block)
	}
	want := []string{"fake_step.b main.hcl:7", `group.svc["x"].fake_step.app main.hcl:11`, `group.svc["x"].fake_step.volume main.hcl:11`}
	if !slices.Equal(letGo, want) {
		t.Errorf("the plan lets go of %q, want %q", letGo, want)
	}
	got := planned(plan)
	if sp := got["fake_step.after"]; sp == nil || sp.Action != providers.Revert || sp.ReasonCode != engine.StepRemoved {
		t.Errorf("fake_step.after (removed, revert = true) planned %+v, want a revert", sp)
	}
	for _, a := range []string{"fake_step.b", `group.svc["x"].fake_step.app`} {
		if sp := got[a]; sp != nil {
			t.Errorf("%s planned %+v: a removed block lets it go", a, sp)
		}
	}
	if !plan.HasChanges() {
		t.Error("a plan that lets records go says it has nothing to do")
	}
	if err := e.CheckSavedPlan(context.Background(), plan); err != nil {
		t.Fatalf("the plan was refused as a saved plan: %v", err)
	}
	if err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if rec := h.record(addr("b")); rec.Status != state.Done || rec.Revert != nil || rec.Facts["let_go_by"] != "removed block at main.hcl:7" || rec.Attempts != 1 {
		t.Errorf("the record of b after the run: %+v", h.record(addr("b")))
	}
	if _, err := h.rollback(after.r); err != nil {
		t.Fatal(err)
	}
	for a, n := range map[string]int{"fake_step.b": 0, `group.svc["x"].fake_step.app`: 0, `group.svc["x"].fake_step.volume`: 0, "fake_step.after": 1, "fake_step.a": 1} {
		if got := h.fake.Reverted(a); got != n {
			t.Errorf("%s reverted %d times, want %d", a, got, n)
		}
	}
}

// TestPhaseDeletedWarns: records of a phase the runbook no longer has
// are undone by nothing: the plan says so (and which), unless a removed
// block lets them go.
func TestPhaseDeletedWarns(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	before := newRB()
	before.step(before.phase("p"), "a")
	before.step(before.phase("q"), "b")
	if err := h.run(before.r); err != nil {
		t.Fatal(err)
	}
	after := newRB().phaseWith("p", "a")
	e, st := h.open(after)
	_, diags := e.Plan(context.Background(), engine.PlanOptions{})
	st.Close()
	if diags.HasErrors() || len(diags) != 1 || diags[0].Summary != "Phase No Longer In The Runbook" || !strings.Contains(diags[0].Detail, "phase q") || !strings.Contains(diags[0].Detail, "fake_step.b") {
		t.Fatalf("plan diagnostics %v, want one warning naming phase q and fake_step.b", diags)
	}
	after.Removed = []*phases.Removed{{From: addr("b"), Range: phases.Range{Filename: "main.hcl", StartLine: 3}}}
	e, st = h.open(after)
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	st.Close()
	if len(diags) != 0 || len(plan.LetGo) != 1 {
		t.Fatalf("with a removed block: diagnostics %v, let go %v; want none, and b let go", diags, plan.LetGo)
	}
}

// edit changes the state's record of the fake step name, as another
// writer (an older migrate) would have left it.
func (h *harness) edit(name string, change func(*state.StepRecord)) {
	h.t.Helper()
	st, err := state.Open(h.dir, state.Options{Lock: state.NewLockInfo("test"), MigrateVersion: "test"})
	if err != nil {
		h.t.Fatal(err)
	}
	defer st.Close()
	rec, ok := st.Step(addr(name))
	if !ok {
		h.t.Fatalf("no record of %s", addr(name))
	}
	change(rec)
	if err := st.Checkpoint(rec); err != nil {
		h.t.Fatal(err)
	}
}
