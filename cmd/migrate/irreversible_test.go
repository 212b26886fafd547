package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestPlanListsIrreversibleSteps: plan, plan --json and the plan run
// shows before it asks all say which steps a rollback will not undo.
func TestPlanListsIrreversibleSteps(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": `
phase "A" {
  step "exec" "oneway" { command = ["true"] }
  step "exec" "undoable" {
    command = ["true"]
    revert  = ["true"]
  }
}
`})
	want := "Rollback will NOT be able to undo:\n    ! exec.oneway: no revert command\n"
	r := run(t, dir, 0, "plan", "--no-color")
	if !strings.Contains(r.stdout, want) || strings.Contains(r.stdout, "! exec.undoable") {
		t.Errorf("plan does not list exactly exec.oneway as irreversible:\n%s", r)
	}
	r = run(t, dir, 0, "plan", "--json")
	var doc struct {
		Phases []struct {
			Irreversible []struct{ Address, Reason string } `json:"irreversible"`
		} `json:"phases"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatal(err)
	}
	if irr := doc.Phases[0].Irreversible; len(irr) != 1 || irr[0].Address != "exec.oneway" || irr[0].Reason != "no revert command" {
		t.Errorf("plan --json lists %+v", irr)
	}
	r = run(t, dir, 0, "run", "--all", "--auto-approve", "--no-color")
	if !strings.Contains(r.stdout, want) {
		t.Errorf("run does not show the irreversible steps before running:\n%s", r)
	}
}
