package engine_test

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/fake"
)

// fromOutput is a step whose value is prefix followed by the output value
// of step from, as a reference in a runbook makes it: an unknown output
// stays unknown (with whatever the engine attached to it).
func fromOutput(p *phases.Phase, name, from, prefix string) *phases.Step {
	return mkStep(p, name, phases.EvaluatorFunc(func(out map[phases.Address]cty.Value) (cty.Value, phases.Diagnostics) {
		v := out[addr(from)].GetAttr("value")
		if v.IsKnown() {
			v = cty.StringVal(prefix + v.AsString())
		}
		return cty.ObjectVal(map[string]cty.Value{"value": v}), nil
	}), from)
}

// waiting is a runbook of one phase, "platform": step first, then step
// second whose value is prefix followed by first's output value.
func waiting(first, second, prefix string) *rb {
	b := newRB()
	p := b.phase("platform")
	b.step(p, first)
	p.Steps = append(p.Steps, fromOutput(p, second, first, prefix))
	return b
}

// mustPlan plans every phase of e and fails the test on an error.
func mustPlan(t *testing.T, e *engine.Engine) *engine.Plan {
	t.Helper()
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	return plan
}

// dialling makes the fake provider fail to plan a step whose value is not
// known, as a provider that dials an address created by an earlier step.
func dialling(f *fake.Provider) {
	f.PlanFn = func(_ context.Context, req providers.PlanRequest) providers.PlanResponse {
		v := req.Config.GetAttr("value")
		if !v.IsKnown() || v.AsString() == "unreachable" {
			return providers.PlanResponse{Diagnostics: phases.Errorf("Unreachable", "node did not answer")}
		}
		return providers.PlanResponse{Diff: "value: " + v.AsString(), Private: []byte(`"planned ` + v.AsString() + `"`)}
	}
}

func stepPlan(t *testing.T, p *engine.Plan, name string) *engine.StepPlan {
	t.Helper()
	for _, ph := range p.Phases {
		for _, s := range ph.Steps {
			if s.Addr == addr(name) {
				return s
			}
		}
	}
	t.Fatalf("no plan for %s", name)
	return nil
}

func TestPlanNamesTheStepAValueWaitsFor(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := waiting("first", "second", "ip=")
	e, _ := h.open(b.r)
	plan := mustPlan(t, e)
	sp := stepPlan(t, plan, "second")
	if want := []phases.Address{addr("first")}; !reflect.DeepEqual(sp.KnownAfter, want) {
		t.Errorf("KnownAfter = %v, want %v", sp.KnownAfter, want)
	}
	if sp.Diff != "value: (known after fake_step.first)" || sp.Action != providers.Create || sp.Deferred {
		t.Errorf("second: action %s, diff %q, deferred %v", sp.Action, sp.Diff, sp.Deferred)
	}
	if first := stepPlan(t, plan, "first"); len(first.KnownAfter) != 0 || first.Diff != `value: "first"` {
		t.Errorf("first: %v %q", first.KnownAfter, first.Diff)
	}
	// The provider never sees the engine's marks.
	if h.fake.PlanRequest.Config.ContainsMarked() {
		t.Errorf("the provider got marked values: %#v", h.fake.PlanRequest.Config)
	}
}

func TestProviderErrorOnUnknownInputsDefersTheDiff(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dialling(h.fake)
	b := waiting("node", "config", "")
	e, _ := h.open(b.r)
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	// node plans with a known value; config cannot be planned yet.
	if diags.HasErrors() {
		t.Fatalf("the plan failed: %v", diags.Err())
	}
	sp := stepPlan(t, plan, "config")
	if sp.Action != providers.Create || !sp.Deferred || sp.Diff != "diff deferred until fake_step.node has run" {
		t.Errorf("config: action %s, deferred %v, diff %q", sp.Action, sp.Deferred, sp.Diff)
	}
}

func TestProviderErrorOnKnownInputsStaysAnError(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dialling(h.fake)
	b := newRB()
	p := b.phase("platform")
	p.Steps = append(p.Steps, mkStep(p, "config", value("unreachable")))
	e, _ := h.open(b.r)
	_, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if !diags.HasErrors() || !strings.Contains(diags.Err().Error(), "node did not answer") {
		t.Fatalf("diags = %v, want the provider's error", diags)
	}
}

func TestRunPlansADeferredStepAgainBeforeApplying(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dialling(h.fake)
	b := waiting("node", "config", "at-")
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	var planned []engine.Event
	for _, ev := range h.events {
		if ev.Kind == engine.StepPlanned {
			planned = append(planned, ev)
		}
	}
	if len(planned) != 1 || planned[0].Addr != addr("config") || planned[0].Message != "value: at-node" {
		t.Fatalf("StepPlanned events = %+v", planned)
	}
	// Apply gets the fresh plan's private data, not the deferred one's.
	if got := string(h.fake.ApplyRequest.Planned); h.fake.ApplyRequest.Addr != addr("config") || got != `"planned at-node"` {
		t.Errorf("Apply of %s got Planned %s", h.fake.ApplyRequest.Addr, got)
	}
}

// A saved plan's step planned again is held to its planned values
// (plannedvalues_test.go), not to the words of its diff: a fresh diff
// worded otherwise, with the same values, runs and is shown.
func TestSavedPlanDiffWordingIsNotCompared(t *testing.T) {
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
	if stepPlan(t, saved, "config").Diff != "value: (known after fake_step.node)" {
		t.Fatalf("saved diff %q", stepPlan(t, saved, "config").Diff)
	}
	h.fake.PlanFn = func(_ context.Context, req providers.PlanRequest) providers.PlanResponse {
		return providers.PlanResponse{Diff: "name: " + req.Config.GetAttr("value").AsString()}
	}
	e, st = h.open(b.r)
	defer st.Close()
	if err := e.Run(context.Background(), context.Background(), saved, engine.RunOptions{SavedPlan: true}); err != nil {
		t.Fatalf("run: %v", err)
	}
	var shown bool
	for _, ev := range h.events {
		shown = shown || ev.Kind == engine.StepPlanned && ev.Addr == addr("config") && ev.Message == "name: at-node"
	}
	if !shown {
		t.Error("the fresh diff of config was not shown")
	}
}

func TestSavedPlanAgreeingWithTheFreshPlanRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := waiting("node", "config", "at-")
	e, st := h.open(b.r)
	plan := mustPlan(t, e)
	if err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{SavedPlan: true}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if h.status("config") != "done" {
		t.Errorf("config is %s", h.status("config"))
	}
}

func TestCheckWaitingForAStepIsPlannedAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("platform")
	b.step(p, "node")
	c := fromOutput(p, "up", "node", "http://")
	c.When = phases.CheckAfter
	p.Checks = append(p.Checks, c)
	e, st := h.open(b.r)
	plan := mustPlan(t, e)
	if sp := stepPlan(t, plan, "up"); sp.Diff != "value: (known after fake_step.node)" {
		t.Errorf("check diff %q", sp.Diff)
	}
	if err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	found := false
	for _, ev := range h.events {
		if ev.Kind == engine.StepPlanned && ev.Addr == addr("up") && ev.Check && ev.Message == `value: "http://node"` {
			found = true
		}
	}
	if !found {
		t.Errorf("no StepPlanned event for the check: %+v", h.events)
	}
}

// An error that holds whatever the unknown values turn out to be (a
// PodSecurity violation of a chart rendered before its cluster exists)
// fails the plan even for a step that waits for another.
func TestDefiniteErrorOnUnknownInputsFailsThePlan(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.fake.PlanFn = func(_ context.Context, req providers.PlanRequest) providers.PlanResponse {
		d := phases.Errorf("PodSecurity Violation", "privileged container in a baseline namespace")
		d[0].Definite = true
		return providers.PlanResponse{Diagnostics: d}
	}
	b := waiting("cluster", "release", "")
	e, _ := h.open(b.r)
	_, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if !diags.HasErrors() || !strings.Contains(diags.Err().Error(), "privileged container") {
		t.Fatalf("diags = %v, want the violation", diags)
	}
}

// TestPlanSaysWhenADependencyChangesFirst: a step planned after one it
// depends on that changes in the same run is told so (what it reads may not
// exist yet); a step with no such dependency is not.
func TestPlanSaysWhenADependencyChangesFirst(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var mu sync.Mutex
	after := map[string]bool{}
	h.fake.PlanFn = func(_ context.Context, req providers.PlanRequest) providers.PlanResponse {
		mu.Lock()
		after[req.Addr.Name] = req.AfterChanges
		mu.Unlock()
		return providers.PlanResponse{Diff: "x"}
	}
	b := newRB()
	p := b.phase("platform")
	b.step(p, "export")
	b.step(p, "pull", "export")
	b.step(p, "alone")
	e, _ := h.open(b.r)
	mustPlan(t, e)
	if want := map[string]bool{"export": false, "pull": true, "alone": false}; !reflect.DeepEqual(after, want) {
		t.Errorf("AfterChanges = %v, want %v", after, want)
	}
}
