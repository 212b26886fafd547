package engine_test

import (
	"context"
	"fmt"
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

	bad := strings.Replace(mustRead(t, path), fmt.Sprintf(`"format_version": %d`, engine.PlanFormatVersion), `"format_version": 99`, 1)
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

// A plan saved before plans held their contract (format version 1) is
// refused: run --plan could not hold it to what was reviewed.
func TestPlanFileWithoutContractRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "old.plan")
	if err := os.WriteFile(path, []byte(`{"format_version": 1, "lineage": "l1", "serial": 3, "phases": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.ReadPlan(path); err == nil || !strings.Contains(err.Error(), "make a new plan") {
		t.Errorf("a plan without contracts was read: %v", err)
	}
}

// TestPlanFileOfEarlierBuildLoads: a plan saved before the phase's
// irreversible list was derived (it was stored, as was each step's
// action name) still loads, and says the same; plan --json still lists
// the irreversible steps of each phase.
func TestPlanFileOfEarlierBuildLoads(t *testing.T) {
	t.Parallel()
	saved := `{
  "format_version": 2,
  "lineage": "l1",
  "serial": 3,
  "phases": [
    {
      "name": "p",
      "complete": false,
      "steps": [
        {"address": "fake_step.a", "action": "create", "irreversible": "cannot be undone: a"},
        {"address": "fake_step.b", "action": "no-op", "status": "done", "irreversible": "not run: not listed"}
      ],
      "irreversible": [{"address": "fake_step.a", "reason": "cannot be undone: a"}]
    }
  ]
}
`
	path := filepath.Join(t.TempDir(), "old.plan")
	if err := os.WriteFile(path, []byte(saved), 0o600); err != nil {
		t.Fatal(err)
	}
	plan, err := engine.ReadPlan(path)
	if err != nil {
		t.Fatal(err)
	}
	pp := plan.Phase("p")
	if got := []providers.Action{pp.Steps[0].Action, pp.Steps[1].Action}; got[0] != providers.Create || got[1] != providers.NoOp {
		t.Errorf("actions read back as %v", got)
	}
	want := []engine.IrreversibleStep{{Addr: addr("a"), Reason: "cannot be undone: a"}}
	if irr := pp.Irreversible(); !reflect.DeepEqual(irr, want) {
		t.Errorf("irreversible %+v, want %+v", irr, want)
	}
	out := filepath.Join(t.TempDir(), "new.plan")
	if err := engine.WritePlan(out, plan); err != nil {
		t.Fatal(err)
	}
	written := mustRead(t, out)
	for _, s := range []string{`"action": "create"`, `"action": "no-op"`, `"irreversible": [`, `"reason": "cannot be undone: a"`} {
		if !strings.Contains(written, s) {
			t.Errorf("the plan written again lacks %s:\n%s", s, written)
		}
	}
}
