package engine_test

import (
	"context"
	"fmt"
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
