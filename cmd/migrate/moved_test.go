package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// movedRunbook is two steps, the second named name, with moved blocks.
func movedRunbook(name, moved string) string {
	return `
phase "A" {
  step "exec" "first" {
    command = ["sh", "-c", "echo run-first >> log.txt"]
    revert  = ["sh", "-c", "echo undo-first >> log.txt"]
  }
  step "exec" "` + name + `" {
    command    = ["sh", "-c", "echo run-second >> log.txt"]
    revert     = ["sh", "-c", "echo undo-second >> log.txt"]
    depends_on = [exec.first]
  }
}
` + moved
}

// firstOnly is movedRunbook with its second step deleted.
const firstOnly = `
phase "A" {
  step "exec" "first" {
    command = ["sh", "-c", "echo run-first >> log.txt"]
    revert  = ["sh", "-c", "echo undo-first >> log.txt"]
  }
}
`

const moveSecond = `
moved {
  from = exec.second
  to   = exec.renamed
}
`

// A step renamed with a moved block keeps its record: the plan shows the
// move and nothing to run, run moves the record and runs nothing, and a
// rollback finds the record at the new address.
func TestMovedKeepsTheRecord(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": movedRunbook("second", "")})
	run(t, dir, 0, "run", "--all", "--auto-approve", "--no-color")
	write := func(text string) {
		if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(movedRunbook("renamed", moveSecond))

	r := run(t, dir, 0, "plan", "--no-color")
	for _, want := range []string{"# exec.second moved to exec.renamed", "Plan: 0 to create, 0 to update, 0 drifted, 2 unchanged. 1 record moved to its step's new address."} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the plan does not say %q:\n%s", want, r)
		}
	}
	r = run(t, dir, 0, "plan", "--json")
	var doc struct {
		Moved  []struct{ From, To string } `json:"moved"`
		Phases []struct {
			Steps []struct {
				Address    string `json:"address"`
				Action     string `json:"action"`
				ReasonCode string `json:"reason_code"`
				MovedFrom  string `json:"moved_from"`
			} `json:"steps"`
		} `json:"phases"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	if len(doc.Moved) != 1 || doc.Moved[0].From != "exec.second" || doc.Moved[0].To != "exec.renamed" {
		t.Errorf("plan --json moved = %+v, want exec.second to exec.renamed", doc.Moved)
	}
	for _, s := range doc.Phases[0].Steps {
		if s.Action != "no-op" || s.ReasonCode != "still_done" {
			t.Errorf("%s: %s (%s), want no-op, still_done", s.Address, s.Action, s.ReasonCode)
		}
		if want := map[string]string{"exec.renamed": "exec.second"}[s.Address]; s.MovedFrom != want {
			t.Errorf("%s: moved_from %q, want %q", s.Address, s.MovedFrom, want)
		}
	}

	// A saved plan makes the move too (its moves are part of its contract).
	run(t, dir, 0, "plan", "--out", "moved.plan")
	run(t, dir, 0, "run", "--plan", "moved.plan", "--auto-approve", "--no-color")
	logText := func() string {
		b, err := os.ReadFile(filepath.Join(dir, "log.txt"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := logText(); got != "run-first\nrun-second\n" {
		t.Errorf("the run after the rename ran something: log.txt = %q", got)
	}
	_, steps := status(t, dir)
	if s, ok := steps["exec.renamed"]; !ok || s.Status != "done" || s.Attempts != 1 {
		t.Errorf("exec.renamed = %+v, want the record of exec.second: done, 1 attempt", s)
	}
	if _, ok := steps["exec.second"]; ok {
		t.Errorf("exec.second still has a record: %v", steps)
	}
	// Moved already: the block does nothing now, and says nothing.
	if r := run(t, dir, 0, "plan", "--no-color"); strings.Contains(r.stdout, "moved") {
		t.Errorf("a plan after the move shows it again:\n%s", r)
	}

	run(t, dir, 0, "rollback", "--auto-approve", "--no-color")
	if got := logText(); got != "run-first\nrun-second\nundo-second\nundo-first\n" {
		t.Errorf("the rollback did not undo the renamed step through its new address: log.txt = %q", got)
	}
	if _, steps := status(t, dir); steps["exec.renamed"].Status != "reverted" {
		t.Errorf("exec.renamed after the rollback = %+v, want reverted", steps["exec.renamed"])
	}
}

// Rolling back right after the rename, before any run, moves the record
// first and undoes the step under its new name.
func TestMovedThenRollback(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": movedRunbook("second", "")})
	run(t, dir, 0, "run", "--all", "--auto-approve", "--no-color")
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(movedRunbook("renamed", moveSecond)), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := run(t, dir, 0, "rollback", "--auto-approve", "--no-color"); !strings.Contains(r.stdout, "# exec.second moved to exec.renamed") {
		t.Errorf("the rollback plan does not show the move:\n%s", r)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "log.txt"))
	if got := string(b); got != "run-first\nrun-second\nundo-second\nundo-first\n" {
		t.Errorf("log.txt = %q, want the renamed step undone", got)
	}
	_, steps := status(t, dir)
	if steps["exec.renamed"].Status != "reverted" || steps["exec.second"].Status != "" {
		t.Errorf("steps = %+v, want exec.renamed reverted and no exec.second", steps)
	}
}

// A move onto a step that has a record of its own is refused at plan, and
// says what to do; run refuses it too, before anything runs.
func TestMovedOntoARecordRefused(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": movedRunbook("second", "") + `
phase "B" {
  step "exec" "renamed" { command = ["true"] }
}
`})
	run(t, dir, 0, "run", "--all", "--auto-approve", "--no-color")
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(movedRunbook("renamed", moveSecond)), 0o644); err != nil {
		t.Fatal(err)
	}
	// exec.renamed of phase B has a record; exec.second's would land on it.
	r := migrate(t, dir, "plan", "--no-color")
	if r.code == 0 {
		t.Fatalf("plan accepted a move onto a record:\n%s", r)
	}
	for _, want := range []string{"Cannot Move Onto a Record", "on main.hcl line 14", "exec.renamed has a record of its own (done)", "Remove the moved block"} {
		if !strings.Contains(r.stderr+r.stdout, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, r)
		}
	}
	if r := migrate(t, dir, "run", "--all", "--auto-approve", "--no-color"); r.code == 0 || !strings.Contains(r.stderr+r.stdout, "Cannot Move Onto a Record") {
		t.Fatalf("run accepted a move onto a record:\n%s", r)
	}
	b, err := os.ReadFile(filepath.Join(dir, ".migrate", "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var snap struct {
		Serial uint64                     `json:"serial"`
		Steps  map[string]json.RawMessage `json:"steps"`
	}
	if err := json.Unmarshal(b, &snap); err != nil {
		t.Fatal(err)
	}
	if len(snap.Steps) != 3 || snap.Steps["exec.second"] == nil || snap.Steps["exec.renamed"] == nil {
		t.Errorf("the refused move changed the state: %s", b)
	}
}

// A step renamed without a moved block is not forgotten: the plan undoes
// the old one (its record's revert) and runs the new one, as Terraform
// destroys and creates, and says how to keep the record instead; a step
// deleted from the runbook is undone by the next run of its phase. The
// world says so, not only the state.
func TestRenamedWithoutMovedUndoesTheOldStep(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": movedRunbook("second", "")})
	run(t, dir, 0, "run", "--all", "--auto-approve", "--no-color")
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(movedRunbook("renamed", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, dir, 0, "plan", "--no-color")
	for _, want := range []string{
		"- exec.second will be reverted: no longer in the runbook (renamed? a moved block from its old address keeps its record): run: sh -c 'echo undo-second >> log.txt'",
		"+ exec.renamed will run",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the plan does not say %q:\n%s", want, r)
		}
	}
	run(t, dir, 0, "run", "--all", "--auto-approve", "--no-color")
	log, _ := os.ReadFile(filepath.Join(dir, "log.txt"))
	if got, want := string(log), "run-first\nrun-second\nundo-second\nrun-second\n"; got != want {
		t.Errorf("log.txt = %q, want %q", got, want)
	}
	_, steps := status(t, dir)
	if steps["exec.renamed"].Status != "done" {
		t.Errorf("exec.renamed after the run: %+v", steps["exec.renamed"])
	}

	// Deleted: the next run of phase A undoes it, and rollback has
	// nothing of it left to undo.
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(firstOnly), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, 0, "run", "--phase", "A", "--auto-approve", "--no-color")
	run(t, dir, 0, "rollback", "--auto-approve", "--no-color")
	log, _ = os.ReadFile(filepath.Join(dir, "log.txt"))
	if got, want := string(log), "run-first\nrun-second\nundo-second\nrun-second\nundo-second\nundo-first\n"; got != want {
		t.Errorf("log.txt = %q, want %q", got, want)
	}
}

// A removed block with revert = false lets a deleted step's record go:
// the plan says so, run and rollback never undo the step, and status
// shows who let it go.
func TestRemovedBlockKeepsWhatTheStepDid(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": movedRunbook("second", "")})
	run(t, dir, 0, "run", "--all", "--auto-approve", "--no-color")
	one := firstOnly + `
removed {
  from   = exec.second
  revert = false
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(one), 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, dir, 0, "plan", "--no-color")
	for _, want := range []string{
		"# exec.second let go (removed block at main.hcl:9): what it did stays, and nothing will undo it",
		"1 record let go (removed blocks): not undone.",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the plan does not say %q:\n%s", want, r)
		}
	}
	if r := migrate(t, dir, "plan", "--detailed-exitcode", "--no-color"); r.code != 2 {
		t.Errorf("plan --detailed-exitcode with a record to let go: %s, want exit 2", r)
	}
	run(t, dir, 0, "run", "--all", "--auto-approve", "--no-color")
	var doc struct {
		Orphans []stepStatus `json:"orphans"`
	}
	if r := run(t, dir, 0, "status", "--json"); json.Unmarshal([]byte(r.stdout), &doc) != nil || len(doc.Orphans) != 1 ||
		doc.Orphans[0].Address != "exec.second" || doc.Orphans[0].Facts["let_go_by"] != "removed block at main.hcl:9" {
		t.Errorf("status --json after the run: the records the runbook no longer has are %+v, want exec.second let go by main.hcl:9\n%s", doc.Orphans, r)
	}
	run(t, dir, 0, "rollback", "--auto-approve", "--no-color")
	log, _ := os.ReadFile(filepath.Join(dir, "log.txt"))
	if got, want := string(log), "run-first\nrun-second\nundo-first\n"; got != want {
		t.Errorf("log.txt = %q, want %q", got, want)
	}
}
