package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// contractRunbook is one phase: exec.first writes a file; extra, when
// given, is added to the phase.
func contractRunbook(extra string) string {
	return `
phase "A" {
  step "exec" "first" {
    command = ["sh", "-c", "echo first >> log.txt"]
  }
` + extra + `
}
`
}

const unreviewed = `
  step "exec" "unreviewed" {
    command = ["touch", "nobody-saw-this"]
  }
`

// A saved plan is a contract: a step added to a planned phase since the
// plan was made is refused before anything runs, and the state keeps no
// record of any step.
func TestSavedPlanRefusesAddedStep(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": contractRunbook("")})
	planFile := filepath.Join(t.TempDir(), "p.json")
	run(t, dir, 0, "plan", "--out", planFile)
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(contractRunbook(unreviewed)), 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, dir, 1, "run", "--plan", planFile, "--auto-approve")
	if !strings.Contains(r.stderr, "exec.unreviewed was added to phase A since the plan was made") {
		t.Errorf("the refusal does not name the added step:\n%s", r)
	}
	for _, f := range []string{"nobody-saw-this", "log.txt", ".migrate"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s exists after the refused run: something ran or was recorded\n%s", f, r)
		}
	}
}

// A step removed since the plan, and one whose attributes changed, are
// refused together, each named.
func TestSavedPlanRefusesRemovedAndChangedSteps(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": contractRunbook(unreviewed)})
	planFile := filepath.Join(t.TempDir(), "p.json")
	run(t, dir, 0, "plan", "--out", planFile)
	edited := strings.Replace(contractRunbook(""), "echo first", "echo changed", 1)
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, dir, 1, "run", "--plan", planFile, "--auto-approve")
	for _, want := range []string{
		"exec.unreviewed is in the plan but no longer in phase A of the runbook",
		"exec.first: its attributes changed since the plan was made",
		"nothing was run: make a new plan",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, r)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "log.txt")); err == nil {
		t.Errorf("exec.first ran from a plan that no longer holds")
	}
}

// A script named in argv, a file of the runbook's directory, is an input:
// edited since the plan, it is refused.
func TestSavedPlanRefusesEditedScript(t *testing.T) {
	t.Parallel()
	script := `
phase "A" {
  step "exec" "script" {
    command = ["sh", "./do.sh"]
  }
}
`
	dir := runbook(t, map[string]string{"main.hcl": script, "do.sh": "echo reviewed > out.txt\n"})
	planFile := filepath.Join(t.TempDir(), "p.json")
	run(t, dir, 0, "plan", "--out", planFile)
	if err := os.WriteFile(filepath.Join(dir, "do.sh"), []byte("touch nobody-saw-this\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, dir, 1, "run", "--plan", planFile, "--auto-approve")
	if !strings.Contains(r.stderr, "exec.script: a file it reads changed") {
		t.Errorf("the refusal does not name the edited script:\n%s", r)
	}
	if _, err := os.Stat(filepath.Join(dir, "nobody-saw-this")); err == nil {
		t.Errorf("the edited script ran")
	}
}

// A script whose argv takes an output of a step done in an earlier run is
// compared before anything runs too: the step before it in the phase
// does not run.
func TestSavedPlanRefusesEditedScriptWithOutputs(t *testing.T) {
	t.Parallel()
	text := `
phase "A" {
  step "exec" "first" {
    command = ["true"]
  }
}
phase "B" {
  step "exec" "zero" {
    command = ["touch", "zero-ran"]
  }
  step "exec" "second" {
    command    = ["sh", "./do.sh", "${exec.first.exit_code}"]
    depends_on = [exec.zero]
  }
}
`
	dir := runbook(t, map[string]string{"main.hcl": text, "do.sh": "echo reviewed\n"})
	run(t, dir, 0, "run", "--phase", "A", "--auto-approve")
	planFile := filepath.Join(t.TempDir(), "p.json")
	run(t, dir, 0, "plan", "--phase", "B", "--out", planFile)
	if err := os.WriteFile(filepath.Join(dir, "do.sh"), []byte("touch nobody-saw-this\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, dir, 1, "run", "--plan", planFile, "--auto-approve")
	if !strings.Contains(r.stderr, "exec.second: a file it reads changed") {
		t.Errorf("the refusal does not name the edited script:\n%s", r)
	}
	if _, err := os.Stat(filepath.Join(dir, "zero-ran")); err == nil {
		t.Errorf("exec.zero ran before the refusal")
	}
}
