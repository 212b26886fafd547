package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/providers"
)

// planningOutputs makes the fake provider's plan of step name tell its
// output already: value, or unknown when value is "".
func planningOutputs(h *harness, name, value string) {
	h.fake.PlanFn = func(_ context.Context, req providers.PlanRequest) providers.PlanResponse {
		resp := providers.PlanResponse{Diff: "value: (known after apply)"}
		if req.Addr == addr(name) {
			v := cty.UnknownVal(cty.String)
			if value != "" {
				v = cty.StringVal(value)
			}
			resp.Outputs = cty.ObjectVal(map[string]cty.Value{"value": v})
		}
		if v := req.Config.GetAttr("value"); v.IsKnown() {
			resp.Diff = "value: " + v.AsString()
		}
		return resp
	}
}

func TestPlannedOutputsReachTheStepsAfter(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	planningOutputs(h, "node", "taint=none")
	b := waiting("node", "judge", "node has ")
	e, st := h.open(b.r)
	plan := mustPlan(t, e)
	sp := stepPlan(t, plan, "judge")
	if len(sp.KnownAfter) != 0 || sp.Deferred || sp.Diff != "value: node has taint=none" {
		t.Fatalf("judge: known after %v, deferred %v, diff %q: the planned output did not reach it", sp.KnownAfter, sp.Deferred, sp.Diff)
	}
	if err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{}); err == nil {
		t.Fatal("the run applied judge although node's output is not what its plan said (the fake applies its value, \"node\")")
	} else {
		var pe *engine.PhaseError
		if !errors.As(err, &pe) || len(pe.Failed) != 1 || pe.Failed[0] != addr("judge") {
			t.Fatalf("run: %v", err)
		}
	}
	st.Close()
	if h.fake.Applied("fake_step.judge") != 0 {
		t.Error("judge was applied with inputs its plan did not show")
	}
	if rec := h.status("judge"); rec == "done" {
		t.Error("judge is done")
	}
}

func TestPlannedOutputsThatHoldRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	planningOutputs(h, "node", "node") // the fake applies its value as its output
	b := waiting("node", "judge", "node has ")
	e, st := h.open(b.r)
	plan := mustPlan(t, e)
	if d := stepPlan(t, plan, "judge").Diff; d != "value: node has node" {
		t.Fatalf("judge: diff %q", d)
	}
	if err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if h.status("judge") != "done" {
		t.Errorf("judge is %s", h.status("judge"))
	}
}

func TestUnknownPlannedOutputsStayKnownAfter(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	planningOutputs(h, "node", "")
	b := waiting("node", "judge", "node has ")
	e, _ := h.open(b.r)
	plan := mustPlan(t, e)
	sp := stepPlan(t, plan, "judge")
	if len(sp.KnownAfter) != 1 || !strings.Contains(sp.Diff, "known after fake_step.node") {
		t.Errorf("judge: known after %v, diff %q", sp.KnownAfter, sp.Diff)
	}
}
