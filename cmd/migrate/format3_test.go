package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/state"
)

// releaseCommit is the main of the last release that wrote state format 2
// (its "inverse" and "record" keys): the state a user of it has.
const releaseCommit = "6338491"

// oldMigrate builds migrate as releaseCommit has it (git archive of this
// repository's commit, built with go build) into dir. The test is skipped
// where the commit is not in the repository (a shallow clone).
func oldMigrate(t *testing.T, dir string) string {
	t.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git repository: %v", err)
	}
	root := strings.TrimSpace(string(top))
	if err := exec.Command("git", "-C", root, "cat-file", "-e", releaseCommit+"^{commit}").Run(); err != nil {
		t.Skipf("commit %s is not in this clone (shallow?): %v", releaseCommit, err)
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("git", "-C", root, "archive", releaseCommit)
	untar := exec.Command("tar", "-x", "-C", src)
	var aerr, uerr bytes.Buffer
	archive.Stderr, untar.Stderr = &aerr, &uerr
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", releaseCommit, err, aerr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("tar: %v\n%s", err, uerr.String())
	}
	bin := filepath.Join(dir, "migrate-"+releaseCommit)
	build := exec.Command("go", "build", "-o", bin, "./cmd/migrate")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of %s: %v\n%s", releaseCommit, err, out)
	}
	return bin
}

// A state left by today's release (format 2), its run killed mid-phase,
// is finished by this build, rolled back with the revert data the old
// release recorded, and is in format 3 afterwards.
func TestFormat2StateRunAndRolledBack(t *testing.T) {
	t.Parallel()
	old := oldMigrate(t, t.TempDir())
	dir := runbook(t, map[string]string{"main.hcl": `
phase "A" {
  step "exec" "first" {
    command = ["sh", "-c", "echo first >> log.txt"]
    revert  = ["sh", "-c", "echo undo-first >> log.txt"]
  }
  step "exec" "second" {
    command    = ["sh", "-c", "touch started; while [ ! -f release ]; do sleep 0.05; done; echo second >> log.txt"]
    revert     = ["sh", "-c", "echo undo-second >> log.txt"]
    depends_on = [exec.first]
  }
}
`})
	// The old release runs the phase and is killed inside its second step.
	first := exec.Command(old, "--runbook", dir, "run", "--all", "--auto-approve")
	first.Dir = dir
	var out, errb bytes.Buffer
	first.Stdout, first.Stderr = &out, &errb
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer first.Process.Kill()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old release did not start exec.second:\n%s\n%s", out.String(), errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	first.Process.Signal(syscall.SIGKILL)
	first.Wait()

	stateFile := filepath.Join(dir, ".migrate", "state.json")
	journal := filepath.Join(dir, ".migrate", "journal.jsonl")
	left, _ := os.ReadFile(stateFile)
	lines, _ := os.ReadFile(journal)
	if !bytes.Contains(left, []byte(`"version": 2,`)) {
		t.Fatalf("the old release did not leave a format 2 state:\n%s", left)
	}
	// exec.first's revert data is in the old format's journal line.
	if !bytes.Contains(lines, []byte(`"inverse":{"description"`)) {
		t.Fatalf("no revert data under \"inverse\" in the old release's journal:\n%s", lines)
	}

	// This build finishes the phase: exec.second was killed in flight.
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, 0, "run", "--all", "--auto-approve")
	_, steps := status(t, dir)
	for _, s := range []string{"exec.first", "exec.second"} {
		if steps[s].Status != "done" {
			t.Fatalf("%s after this build's run: %+v", s, steps[s])
		}
	}
	if steps["exec.first"].Attempts != 1 {
		t.Errorf("exec.first ran again: %+v", steps["exec.first"])
	}
	// The state is in format 3 now, the old release's revert data under
	// the new key.
	assertFormat3(t, stateFile, `"revert":{"description":"run: sh -c 'echo undo-first`)
	// And rolls it back, exec.first with the old release's revert data.
	run(t, dir, 0, "rollback", "--auto-approve")
	log, _ := os.ReadFile(filepath.Join(dir, "log.txt"))
	if got, want := string(log), "first\nsecond\nundo-second\nundo-first\n"; got != want {
		t.Errorf("log.txt = %q, want %q", got, want)
	}
	_, steps = status(t, dir)
	for _, s := range []string{"exec.first", "exec.second"} {
		if steps[s].Status != "reverted" {
			t.Errorf("%s after rollback: %+v", s, steps[s])
		}
	}

	assertFormat3(t, stateFile, "")
	// The old release refuses it, saying why.
	cmd := exec.Command(old, "--runbook", dir, "status")
	cmd.Dir = dir
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err == nil || !strings.Contains(e.String(), "upgrade migrate") {
		t.Errorf("the old release on a format 3 state: %v\n%s%s", err, o.String(), e.String())
	}
}

// assertFormat3 fails unless the state file is in this build's format
// (3 or later), without the keys of format 2, and holds want.
func assertFormat3(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var head struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(b, &head); err != nil || head.Version != state.CurrentVersion {
		t.Fatalf("state: version %d (%v), want %d:\n%s", head.Version, err, state.CurrentVersion, b)
	}
	if bytes.Contains(b, []byte(`"inverse"`)) || bytes.Contains(b, []byte(`"record"`)) {
		t.Errorf("a format 3 state with a key of format 2:\n%s", b)
	}
	if !bytes.Contains(b, []byte(want)) {
		t.Errorf("state lacks %s:\n%s", want, b)
	}
}
