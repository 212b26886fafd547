package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A saved plan keeps the planned values of exec.second, which run plans
// again; a plan without them (made by an older migrate) is refused before
// anything runs.
func TestSavedPlanWithoutPlannedValuesIsRefused(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": deferredRunbook})
	planFile := filepath.Join(t.TempDir(), "plan.json")
	run(t, dir, 0, "plan", "--out", planFile)
	b, err := os.ReadFile(planFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"inputs.command[0]": "`) || !strings.Contains(string(b), `"inputs.command[1]": "unknown"`) {
		t.Fatalf("the saved plan lacks exec.second's planned values:\n%s", b)
	}
	var plan map[string]any
	if err := json.Unmarshal(b, &plan); err != nil {
		t.Fatal(err)
	}
	for _, ph := range plan["phases"].([]any) {
		for _, s := range ph.(map[string]any)["steps"].([]any) {
			delete(s.(map[string]any), "planned_values")
		}
	}
	if b, err = json.Marshal(plan); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(planFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	r := run(t, dir, 1, "run", "--plan", planFile, "--no-color")
	for _, want := range []string{"older migrate", "exec.second", "make a new plan"} {
		if !strings.Contains(r.stdout+r.stderr, want) {
			t.Errorf("run --plan lacks %q: %s", want, r)
		}
	}
	if _, steps := status(t, dir); steps["exec.first"].Status != "pending" || steps["exec.second"].Status != "pending" {
		t.Errorf("a step ran from a plan that cannot be compared: %+v", steps)
	}
}
