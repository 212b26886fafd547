package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

func TestPlanFileRoundTripAndAtomicReplace(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("p")
	b.step(p, "a")
	b.step(p, "b", "a")
	b.check(p, "verify", phases.CheckAfter)
	e, _ := h.open(b.r)
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}

	path := filepath.Join(t.TempDir(), "saved.plan")
	if err := os.WriteFile(path, []byte("the previous plan"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A second name for the old file: a plan written in place (truncate
	// and write) would change what it shows; a replaced file does not.
	old := path + ".old"
	if err := os.Link(path, old); err != nil {
		t.Fatal(err)
	}
	if err := engine.WritePlan(path, plan); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(old); string(b) != "the previous plan" {
		t.Errorf("the plan was written into the old file, not replacing it: the old one reads %q", b)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("saved plan mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if left, _ := filepath.Glob(path + ".tmp-*"); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}

	got, err := engine.ReadPlan(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, plan) {
		t.Errorf("read back %+v, want %+v", got, plan)
	}

	bad := strings.Replace(mustRead(t, path), `"format_version": 1`, `"format_version": 99`, 1)
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.ReadPlan(path); err == nil || !strings.Contains(err.Error(), "format version 99") {
		t.Errorf("a plan of another format was read: %v", err)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A check that would run is a change of the plan too (plan
// --detailed-exitcode exits 2 for it), a plan of no-ops none.
func TestPlanHasChangesCountsChecks(t *testing.T) {
	t.Parallel()
	step := &engine.StepPlan{Addr: addr("s"), Action: providers.NoOp}
	check := &engine.StepPlan{Addr: addr("c"), When: phases.CheckAfter, Action: providers.NoOp}
	plan := &engine.Plan{Phases: []*engine.PhasePlan{{Name: "p", Steps: []*engine.StepPlan{step, check}}}}
	if plan.HasChanges() {
		t.Error("a plan of no-ops has changes")
	}
	check.Action = providers.Create
	if !plan.HasChanges() || !plan.Phases[0].HasChanges() {
		t.Error("a plan that runs a check has no changes")
	}
	check.Action, step.Action = providers.NoOp, providers.Update
	if !plan.HasChanges() {
		t.Error("a plan that updates a step has no changes")
	}
}
