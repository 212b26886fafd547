package engine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
)

func names(list []*phases.Phase) []string {
	var out []string
	for _, p := range list {
		out = append(out, p.Name)
	}
	return out
}

// Phases run after those they name, in declaration order otherwise; a
// cycle is refused with its path.
func TestPhaseOrder(t *testing.T) {
	t.Parallel()
	r := &phases.Runbook{Phases: []*phases.Phase{{Name: "a", After: []string{"c"}}, {Name: "b"}, {Name: "c"}}}
	got, err := engine.PhaseOrder(r)
	if err != nil || !slices.Equal(names(got), []string{"c", "a", "b"}) {
		t.Errorf("order %v (%v), want [c a b]", names(got), err)
	}
	r.Phases[2].After = []string{"b", "a"}
	if _, err := engine.PhaseOrder(r); err == nil || !strings.Contains(err.Error(), "a -> c -> a") {
		t.Errorf("cycle: %v", err)
	}
	r.Phases[2].After = []string{"nowhere"}
	if _, err := engine.PhaseOrder(r); err == nil || !strings.Contains(err.Error(), `unknown phase "nowhere"`) {
		t.Errorf("unknown phase: %v", err)
	}
}

// Thousands of phases in a chain: ordering them and checking that every
// earlier phase of a plan is complete or runs first stay far from
// quadratic.
func TestManyPhases(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	const n = 3000
	for i := range n {
		b.step(b.phase(fmt.Sprintf("p%d", i)), fmt.Sprintf("s%d", i))
	}
	start := time.Now()
	e, _ := h.open(b.r)
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	if err := e.ValidatePlan(plan); err != nil {
		t.Fatal(err)
	}
	if _, err := e.PlanRollback(nil); err != nil {
		t.Fatal(err)
	}
	if got := names(e.Phases()); got[0] != "p0" || got[n-1] != fmt.Sprintf("p%d", n-1) {
		t.Errorf("order from %s to %s", got[0], got[n-1])
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("%d phases took %s", n, d)
	}
}
