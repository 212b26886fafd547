package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// deferredRunbook has a step whose command uses the exit code of a step
// before it: a value known only after that step has run.
const deferredRunbook = `
phase "p" {
  step "exec" "first" {
    command = ["true"]
  }
  step "exec" "second" {
    command = ["echo", "first said ${exec.first.exit_code}"]
  }
}
`

func TestPlanShowsValuesKnownAfterAStep(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": deferredRunbook})
	r := run(t, dir, 0, "plan", "--no-color")
	if !strings.Contains(r.stdout, "  + exec.second will run\n      run: echo (known after exec.first)\n") {
		t.Errorf("plan: %s", r)
	}
	r = run(t, dir, 0, "plan", "--json")
	if !strings.Contains(r.stdout, `"diff": "run: echo (known after exec.first)"`) || !strings.Contains(r.stdout, `"known_after": [`) {
		t.Errorf("plan --json: %s", r)
	}
}

func TestRunShowsTheFreshPlanOfADeferredStep(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": deferredRunbook})
	r := run(t, dir, 0, "run", "--all", "--auto-approve", "--no-color")
	for _, want := range []string{
		"run: echo (known after exec.first)\n", // the plan shown before the run
		"exec.first: done",
		"exec.second: planned now that its inputs are known:\n    run: echo 'first said 0'\nexec.second: started\n",
		"exec.second | first said 0\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("run lacks %q: %s", want, r)
		}
	}
	logs, _ := filepath.Glob(filepath.Join(dir, ".migrate", "logs", "*-run.log"))
	if len(logs) != 1 {
		t.Fatalf("run logs: %v", logs)
	}
	b, err := os.ReadFile(logs[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "step_planned phase=p exec.second: planned now that its inputs are known\n  run: echo 'first said 0'\n") {
		t.Errorf("the log lacks the fresh plan:\n%s", b)
	}
}

func TestSavedPlanContradictedAfterApplyIsRefused(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": deferredRunbook})
	planFile := filepath.Join(t.TempDir(), "plan.json")
	run(t, dir, 0, "plan", "--out", planFile)
	// The runbook changes after the plan was saved, in a way only the
	// fresh plan of exec.second can see: its inputs were not known.
	changed := strings.Replace(deferredRunbook, `"echo", "first said`, `"printf", "first said`, 1)
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	// exec.second's command waits for exec.first, but its attributes as
	// written are part of the plan's contract: the change is refused
	// before exec.first runs.
	r := run(t, dir, 1, "run", "--plan", planFile, "--no-color")
	for _, want := range []string{
		"exec.second: its attributes changed since the plan was made",
		"make a new plan",
	} {
		if !strings.Contains(r.stdout+r.stderr, want) {
			t.Errorf("run --plan lacks %q: %s", want, r)
		}
	}
	if _, steps := status(t, dir); steps["exec.second"].Status != "pending" || steps["exec.first"].Status != "pending" {
		t.Errorf("a step ran from a plan that no longer holds: %+v", steps)
	}

	// Unchanged, the saved plan runs.
	dir = runbook(t, map[string]string{"main.hcl": deferredRunbook})
	run(t, dir, 0, "plan", "--out", planFile)
	r = run(t, dir, 0, "run", "--plan", planFile, "--no-color")
	if !strings.Contains(r.stdout, "exec.second | first said 0") {
		t.Errorf("run --plan: %s", r)
	}
}
