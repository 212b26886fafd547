package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// bin is the migrate binary built once for every test.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "migrate-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// A build without the sums of the provider programs, as go build makes
	// it; madeMigrate builds one as make build does.
	bin = filepath.Join(dir, "migrate")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

// runbook writes files into a fresh directory and returns it.
func runbook(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// migrate runs the binary on the runbook in dir, as a user would from a
// script: no terminal, no input.
func migrate(t *testing.T, dir string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--runbook", dir}, args...)...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("migrate %v: %v", args, err)
	}
	return r
}

// expect fails the test unless the command exited with code.
func expect(t *testing.T, r result, code int, args ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("migrate %v: want exit %d, got %s", args, code, r)
	}
}

func run(t *testing.T, dir string, code int, args ...string) result {
	t.Helper()
	r := migrate(t, dir, args...)
	expect(t, r, code, args...)
	return r
}

type stepStatus struct {
	Address  string            `json:"address"`
	Status   string            `json:"status"`
	Attempts int               `json:"attempts"`
	Facts    map[string]string `json:"facts"`
}

type statusDoc struct {
	Phases []struct {
		Name   string       `json:"name"`
		Status string       `json:"status"`
		Steps  []stepStatus `json:"steps"`
	} `json:"phases"`
}

func status(t *testing.T, dir string) (phases map[string]string, steps map[string]stepStatus) {
	t.Helper()
	r := run(t, dir, 0, "status", "--json")
	var doc statusDoc
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r)
	}
	phases, steps = map[string]string{}, map[string]stepStatus{}
	for _, p := range doc.Phases {
		phases[p.Name] = p.Status
		for _, s := range p.Steps {
			steps[s.Address] = s
		}
	}
	return phases, steps
}

const twoPhases = `
phase "A" {
  description = "the first phase"
  step "exec" "a1" {
    command = ["sh", "-c", "echo a1 >> log.txt"]
    revert  = ["sh", "-c", "echo undo-a1 >> log.txt"]
  }
  step "exec" "a2" {
    command    = ["sh", "-c", "echo a2 >> log.txt"]
    revert     = ["sh", "-c", "echo undo-a2 >> log.txt"]
    depends_on = [exec.a1]
  }
}

phase "B" {
  step "exec" "b1" {
    command = ["sh", "-c", "echo b1 >> log.txt"]
    revert  = ["sh", "-c", "echo undo-b1 >> log.txt"]
  }
  step "exec" "b2" {
    command    = ["sh", "-c", "echo b2 >> log.txt"]
    depends_on = [exec.b1]
  }
  step "wait" "pause" { duration = "0s" }
}
`

func TestValidate(t *testing.T) {
	t.Parallel()
	good := runbook(t, map[string]string{"main.hcl": twoPhases})
	r := run(t, good, 0, "validate")
	if !strings.Contains(r.stdout, "The runbook is valid: 2 phases, 5 steps.") {
		t.Errorf("validate: %s", r)
	}

	bad := runbook(t, map[string]string{"main.hcl": `phase "A" {
  step "exec" "a" {
    command = ["true"]
    bogus   = 1
  }
  step "exec" "b" {
    command    = ["true"]
    depends_on = [exec.nope]
  }
}
`})
	r = run(t, bad, 1, "validate")
	for _, want := range []string{"main.hcl line 4", "bogus", "main.hcl line 8", "exec.nope"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("validate: stderr lacks %q: %s", want, r)
		}
	}
	if strings.Contains(r.stdout, "valid") {
		t.Errorf("validate of a bad runbook claims it is valid: %s", r)
	}
	// Every command that loads the runbook refuses it the same way.
	r = run(t, bad, 1, "plan")
	if !strings.Contains(r.stderr, "main.hcl line 4") {
		t.Errorf("plan: %s", r)
	}
}

// A step among two provider blocks of its type that names neither is
// refused at its line, with both blocks and the fix.
func TestValidateAmbiguousProvider(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": `provider "talos" "rehearsal" {
  version = "v1.13.3"
}
provider "talos" "node" {
  version = "v1.13.3"
}
phase "A" {
  step "talos_kubeconfig" "admin" {
    path = "kubeconfig"
  }
  step "talos_kubeconfig" "chosen" {
    provider = talos.node
    path     = "kubeconfig.node"
  }
}
`})
	r := run(t, dir, 1, "validate")
	stderr := strings.Join(strings.Fields(r.stderr), " ") // the detail is wrapped
	for _, want := range []string{"main.hcl line 8", "Ambiguous Provider", "talos_kubeconfig.admin", "talos.rehearsal (main.hcl:1) and talos.node (main.hcl:4)", "provider = talos.rehearsal"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("validate: stderr lacks %q: %s", want, r)
		}
	}
	if strings.Contains(r.stderr, "talos_kubeconfig.chosen") {
		t.Errorf("validate blames the step that names its provider: %s", r)
	}
}

func TestPlanRunStatus(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": twoPhases})

	r := run(t, dir, 0, "plan")
	for _, want := range []string{"Phase A (not complete)", "# the first phase", "+ exec.a1 will run", "+ exec.b1 will run",
		"Plan: 5 to create, 0 to update, 0 drifted, 0 unchanged."} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("plan lacks %q: %s", want, r)
		}
	}
	run(t, dir, 2, "plan", "--detailed-exitcode")
	r = run(t, dir, 0, "plan", "--json")
	var plan struct {
		Phases []struct {
			Name  string `json:"name"`
			Steps []struct {
				Address, Action string
			} `json:"steps"`
		} `json:"phases"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil || len(plan.Phases) != 2 || plan.Phases[0].Steps[0].Action != "create" {
		t.Fatalf("plan --json: %v %+v\n%s", err, plan, r)
	}

	r = run(t, dir, 0, "run", "--all", "--auto-approve")
	for _, want := range []string{"exec.a1: started", "exec.a1: done (", "Phase A complete: 2 done", "Run complete: 5 steps done"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("run lacks %q: %s", want, r)
		}
	}
	phases, steps := status(t, dir)
	for _, p := range []string{"A", "B"} {
		if phases[p] != "complete" {
			t.Errorf("phase %s is %q, want complete", p, phases[p])
		}
	}
	for _, a := range []string{"exec.a1", "exec.a2", "exec.b1", "exec.b2", "wait.pause"} {
		if s := steps[a]; s.Status != "done" || s.Attempts != 1 {
			t.Errorf("step %s: %+v, want done after 1 attempt", a, s)
		}
	}
	r = run(t, dir, 0, "status")
	if !strings.Contains(r.stdout, "Phase A: complete") || !strings.Contains(r.stdout, "exec.a1") {
		t.Errorf("status: %s", r)
	}

	// Nothing left to do: the plan says so, and so does run.
	r = run(t, dir, 0, "plan", "--detailed-exitcode")
	if !strings.Contains(r.stdout, "0 to create, 0 to update, 0 drifted, 5 unchanged") {
		t.Errorf("plan after run: %s", r)
	}
	r = run(t, dir, 0, "run", "--all")
	if !strings.Contains(r.stdout, "Nothing to run") {
		t.Errorf("second run: %s", r)
	}

	// The same step runs only once: log.txt has each line once.
	b, _ := os.ReadFile(filepath.Join(dir, "log.txt"))
	if got := string(b); got != "a1\na2\nb1\nb2\n" {
		t.Errorf("log.txt = %q", got)
	}

	// Rollback undoes in reverse order, phase by phase from the last.
	r = run(t, dir, 0, "rollback", "--auto-approve")
	for _, want := range []string{"- exec.b1 will be undone", "Rollback: 4 to undo, 1 cannot be undone.", "CANNOT be undone", "! exec.b2", "Rollback complete"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("rollback lacks %q: %s", want, r)
		}
	}
	b, _ = os.ReadFile(filepath.Join(dir, "log.txt"))
	if got := string(b); got != "a1\na2\nb1\nb2\nundo-b1\nundo-a2\nundo-a1\n" {
		t.Errorf("log.txt after rollback = %q", got)
	}
	_, steps = status(t, dir)
	if s := steps["exec.a1"]; s.Status != "reverted" {
		t.Errorf("exec.a1 after rollback: %+v", s)
	}
	r = run(t, dir, 0, "rollback", "--auto-approve")
	if !strings.Contains(r.stdout, "Nothing to roll back") {
		t.Errorf("second rollback: %s", r)
	}
}

func TestRunFlagsAndOrder(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": twoPhases})
	r := run(t, dir, 1, "run")
	if !strings.Contains(r.stderr, "--all") {
		t.Errorf("run without a phase: %s", r)
	}
	r = run(t, dir, 1, "run", "--phase", "B", "--auto-approve")
	if !strings.Contains(r.stderr, "phase B runs after A") || !strings.Contains(r.stderr, "--phase A") {
		t.Errorf("run --phase B before A: %s", r)
	}
	r = run(t, dir, 1, "run", "--phase", "nope", "--auto-approve")
	if !strings.Contains(r.stderr, `"nope"`) {
		t.Errorf("run --phase nope: %s", r)
	}
	// Not a terminal and no --auto-approve: refused, naming the flag.
	r = run(t, dir, 1, "run", "--phase", "A")
	if !strings.Contains(r.stderr, "--auto-approve") {
		t.Errorf("run without --auto-approve: %s", r)
	}
	if _, err := os.Stat(filepath.Join(dir, "log.txt")); err == nil {
		t.Errorf("a refused run ran steps")
	}
	run(t, dir, 0, "run", "--phase", "A", "--auto-approve")
	run(t, dir, 0, "run", "--phase", "B", "--auto-approve")
}

func TestFailingStep(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": `
phase "A" {
  step "exec" "ok" { command = ["true"] }
  step "exec" "bad" { command = ["sh", "-c", "echo about to fail; exit 7"] }
  step "exec" "after_bad" {
    command    = ["true"]
    depends_on = [exec.bad]
  }
  step "exec" "after_after" {
    command    = ["true"]
    depends_on = [exec.after_bad]
  }
}
`})
	r := run(t, dir, 1, "run", "--all", "--auto-approve")
	for _, want := range []string{"exec.bad | about to fail", "exec.bad: failed", "exec.after_bad: skipped", "Phase A failed: 1 done, 1 failed, 2 skipped"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("run lacks %q: %s", want, r)
		}
	}
	if !strings.Contains(r.stderr, "exec.bad") {
		t.Errorf("the error does not name the failed step: %s", r)
	}
	phases, steps := status(t, dir)
	if phases["A"] != "failed" {
		t.Errorf("phase A is %q", phases["A"])
	}
	if s := steps["exec.bad"]; s.Status != "failed" {
		t.Errorf("exec.bad: %+v", s)
	}
	if s := steps["exec.ok"]; s.Status != "done" {
		t.Errorf("exec.ok: %+v", s)
	}
	for _, a := range []string{"exec.after_bad", "exec.after_after"} {
		if s := steps[a]; s.Status != "pending" || s.Attempts != 0 {
			t.Errorf("%s ran: %+v", a, s)
		}
	}
	r = run(t, dir, 0, "status")
	if !strings.Contains(r.stdout, "Phase A: failed") || !strings.Contains(r.stdout, "exited with code 7") {
		t.Errorf("status: %s", r)
	}
}

func TestJSONEvents(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": twoPhases})
	r := run(t, dir, 0, "run", "--all", "--auto-approve", "--json")
	kinds := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("not a JSON line: %q: %v", sc.Text(), err)
		}
		k, _ := ev["kind"].(string)
		kinds[k]++
	}
	if kinds["step_done"] != 5 || kinds["phase_completed"] != 2 || kinds["step_started"] != 5 {
		t.Errorf("events: %v\n%s", kinds, r)
	}
}

func TestStalePlan(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": twoPhases})
	planFile := filepath.Join(t.TempDir(), "plan.json")
	run(t, dir, 0, "plan", "--out", planFile)
	if fi, err := os.Stat(planFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("plan file: %v %v", fi, err)
	}
	run(t, dir, 0, "run", "--phase", "A", "--auto-approve")
	r := run(t, dir, 1, "run", "--plan", planFile)
	if !strings.Contains(r.stderr, "make a new plan") {
		t.Errorf("stale plan: %s", r)
	}
	if _, steps := status(t, dir); steps["exec.b1"].Status != "pending" {
		t.Errorf("a stale plan ran: %+v", steps["exec.b1"])
	}
	// A fresh plan runs without a question.
	run(t, dir, 0, "plan", "--out", planFile)
	r = run(t, dir, 0, "run", "--plan", planFile)
	if !strings.Contains(r.stdout, "exec.b1: done") {
		t.Errorf("run --plan: %s", r)
	}
}

// approvalRunbook is a runbook of one approval step, approval.dns, that
// asks message.
func approvalRunbook(message string) string {
	return `
phase "cutover" {
  step "approval" "dns" { message = "` + message + `" }
}
`
}

func TestApproval(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": approvalRunbook("switch DNS at the registrar")})
	r := run(t, dir, 1, "run", "--all", "--auto-approve")
	if !strings.Contains(r.stdout+r.stderr, "--approve approval.dns") {
		t.Errorf("approval without --approve: %s", r)
	}
	run(t, dir, 1, "run", "--all", "--auto-approve", "--approve", "not-an-address")
	run(t, dir, 0, "run", "--all", "--auto-approve", "--approve", "approval.dns")
	_, steps := status(t, dir)
	s := steps["approval.dns"]
	if s.Status != "done" || !strings.Contains(s.Facts["approved_by"], "@") {
		t.Errorf("approval.dns: %+v", s)
	}
	r = run(t, dir, 0, "state", "show", "--json")
	if !strings.Contains(r.stdout, `"approved_by"`) {
		t.Errorf("state show: %s", r)
	}
}

func TestLockAndInterrupt(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": `
phase "A" {
  step "exec" "long" { command = ["sleep", "30"] }
}
`})
	first := exec.Command(bin, "--runbook", dir, "run", "--all", "--auto-approve")
	var out, errb bytes.Buffer
	first.Stdout, first.Stderr = &out, &errb
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer first.Process.Kill()

	// Wait until the first run holds the lock and its step runs.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, steps := status(t, dir); steps["exec.long"].Status == "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first run did not start its step:\n%s\n%s", out.String(), errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := run(t, dir, 1, "run", "--all", "--auto-approve")
	want := fmt.Sprintf("locked by pid %d", first.Process.Pid)
	if !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "run --all --auto-approve") {
		t.Errorf("second run: want %q in %s", want, r)
	}
	r = run(t, dir, 0, "state", "show", "--json")
	var shown struct {
		Lock *struct {
			ID  string `json:"id"`
			PID int    `json:"pid"`
		} `json:"lock"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || shown.Lock == nil || shown.Lock.PID != first.Process.Pid {
		t.Errorf("state show --json during the run: %v %s", err, r)
	}
	// A live holder's lock cannot be broken.
	if shown.Lock != nil {
		run(t, dir, 1, "state", "unlock", shown.Lock.ID)
	}

	// First Ctrl-C: stop after the running step; second: abort it.
	first.Process.Signal(syscall.SIGINT)
	time.Sleep(200 * time.Millisecond)
	first.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- first.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatalf("the run did not stop after two interrupts:\n%s\n%s", out.String(), errb.String())
	}
	if code := first.ProcessState.ExitCode(); code != 130 {
		t.Errorf("interrupted run exited %d, want 130\n%s\n%s", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "Stopping after the running steps finish (steps that only wait stop now, not done); press Ctrl-C again to abort") {
		t.Errorf("no stopping message: %s", errb.String())
	}
	// The state was saved and unlocked.
	r = run(t, dir, 0, "state", "show", "--json")
	if !strings.Contains(r.stdout, `"lock": null`) {
		t.Errorf("lock left behind: %s", r)
	}
	if _, steps := status(t, dir); steps["exec.long"].Status == "done" {
		t.Errorf("aborted step recorded as done")
	}
}

func TestGraph(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": twoPhases})
	r := run(t, dir, 0, "graph")
	for _, want := range []string{`subgraph "cluster_A"`, `"exec.a1" -> "exec.a2";`, `"phase:A" -> "phase:B"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("graph lacks %q: %s", want, r)
		}
	}
	if again := run(t, dir, 0, "graph"); again.stdout != r.stdout {
		t.Errorf("graph is not deterministic")
	}
	r = run(t, dir, 0, "graph", "--format", "mermaid")
	if !strings.HasPrefix(r.stdout, "flowchart LR\n") || !strings.Contains(r.stdout, "n0 --> n1") || !strings.Contains(r.stdout, "p0 -.-> p1") {
		t.Errorf("mermaid: %s", r)
	}
	if r = run(t, dir, 0, "graph", "--format", "svg"); !strings.HasPrefix(r.stdout, "<svg ") || !strings.Contains(r.stdout, `data-from="exec.a1" data-to="exec.a2"`) {
		t.Errorf("svg: %s", r)
	}
	run(t, dir, 1, "graph", "--format", "png")
}

const canary = "CANARY-s3cr3t"

// TestSensitiveCanary plants a sensitive variable and looks for it in
// every output and every file migrate writes.
func TestSensitiveCanary(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": `
variable "token" {
  sensitive = true
  default   = "` + canary + `"
}

phase "A" {
  step "exec" "use" {
    command = ["sh", "-c", "echo token=$TOKEN; echo arg=${var.token}; echo ok > used.txt"]
    env     = { TOKEN = var.token }
    revert  = ["sh", "-c", "echo ${var.token} >/dev/null; rm -f used.txt"]
  }
  step "exec" "fail" {
    command    = ["sh", "-c", "echo failing with ${var.token}; exit 1"]
    depends_on = [exec.use]
  }
}
`})
	planFile := filepath.Join(dir, "plan.json")
	var all []result
	all = append(all,
		run(t, dir, 0, "validate"),
		run(t, dir, 0, "plan"),
		run(t, dir, 0, "plan", "--json"),
		run(t, dir, 0, "plan", "--out", planFile),
		run(t, dir, 0, "graph"),
		run(t, dir, 1, "run", "--plan", planFile, "--json"),
		run(t, dir, 1, "run", "--all", "--auto-approve"),
		run(t, dir, 0, "status"),
		run(t, dir, 0, "status", "--json"),
		run(t, dir, 0, "state", "show"),
		run(t, dir, 0, "state", "show", "--json"),
		run(t, dir, 0, "rollback", "--auto-approve"),
		run(t, dir, 0, "plan", "--log-level", "debug"),
	)
	if _, err := os.Stat(filepath.Join(dir, "used.txt")); err == nil {
		t.Errorf("the revert command did not run")
	}
	for _, r := range all {
		if strings.Contains(r.stdout+r.stderr, canary) {
			t.Errorf("the canary leaked into the output: %s", r)
		}
	}
	if !strings.Contains(all[5].stdout, `token=(sensitive value)`) || !strings.Contains(all[6].stdout, "failing with (sensitive value)") {
		t.Errorf("the steps' output is not redacted as expected: %s\n%s", all[5], all[6])
	}
	files := []string{planFile}
	filepath.WalkDir(filepath.Join(dir, ".migrate"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, path)
		}
		return nil
	})
	if logs, _ := filepath.Glob(filepath.Join(dir, ".migrate", "logs", "*.log")); len(files) < 3 || len(logs) != 3 {
		t.Fatalf("want the state files and a log of each run and rollback, got %v", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(canary)) {
			t.Errorf("the canary leaked into %s", f)
		}
	}
}

func TestExitCodeAndCommandLine(t *testing.T) {
	t.Parallel()
	if got := commandLine([]string{"/usr/bin/migrate", "run", "--var", "token=s3cr3t", "--var=pw=x", "--all"}); got != "migrate run --var token=… --var=pw=… --all" {
		t.Errorf("commandLine = %q", got)
	}
	if exitCode(nil) != 0 || exitCode(reported(2)) != 2 || exitCode(fmt.Errorf("x")) != 1 {
		t.Errorf("exitCode")
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := run(t, t.TempDir(), 0, "version")
	if !strings.HasPrefix(r.stdout, "migrate dev (go") {
		t.Errorf("version: %s", r)
	}
	r = run(t, t.TempDir(), 0, "--help")
	if !strings.Contains(r.stdout, "130") || !strings.Contains(r.stdout, "Exit codes") {
		t.Errorf("help does not document exit codes: %s", r)
	}
}

// TestVersionFindsProviderPrograms: version says which program each
// plugin provider runs, or why none, and how to get it; this migrate,
// built by go build, without sums, runs them unverified.
func TestVersionFindsProviderPrograms(t *testing.T) {
	plugins := t.TempDir()
	talos := filepath.Join(plugins, "migrate-provider-talos")
	if err := os.WriteFile(talos, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "version")
	cmd.Env = append(os.Environ(), "MIGRATE_PLUGIN_DIR="+plugins, "PATH=/nonexistent")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("version: %v\n%s", err, out)
	}
	for _, want := range []string{"provider talos: " + talos + " (sha256 " + sha256Hex("#!/bin/sh\n")[:12] + ", NOT VERIFIED", "provider helm: not usable", "make build"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("version lacks %q:\n%s", want, out)
		}
	}
}

// leakToken is cut into pieces by the runbooks below: "cnry" and
// "Q4zXw9KpL2m" around the 7, or one character at a time.
const leakToken = "cnry7Q4zXw9KpL2m"

// noPieces fails unless the output is free of the token and its pieces.
func noPieces(t *testing.T, r result) {
	t.Helper()
	out := r.stdout + r.stderr
	for _, piece := range []string{leakToken, "cnry", "Q4zXw9KpL2m", "with s as", "with c as", `"Q"`, `"z"`, `"X"`, `"K"`} {
		if strings.Contains(out, piece) {
			t.Errorf("%q leaked: %s", piece, r)
		}
	}
}

// TestSensitiveDiagnostics: an expression over a sensitive value reports
// its error without the value or pieces of it, at load time (validate,
// plan, run) and when the engine evaluates a step (plan, run).
func TestSensitiveDiagnostics(t *testing.T) {
	t.Parallel()
	const variable = `
variable "tok" {
  type      = string
  sensitive = true
  default   = "` + leakToken + `"
}
`
	dir := runbook(t, map[string]string{"main.hcl": variable + `
phase "A" {
  step "exec" "num" {
    command = [for s in split("7", var.tok) : tonumber(s)]
  }
  step "exec" "hex" {
    command = [for c in split("", var.tok) : format("%x", c)]
  }
}
`})
	for _, args := range [][]string{{"validate"}, {"plan"}, {"run", "--all", "--auto-approve"}} {
		r := run(t, dir, 1, args...)
		noPieces(t, r)
		if !strings.Contains(r.stderr, "depends on a sensitive value") || strings.Count(r.stderr, "Error: ") != 2 {
			t.Errorf("migrate %v: want two errors saying the expression depends on a sensitive value: %s", args, r)
		}
	}

	// Known only once exec.first ran: the engine evaluates them.
	dir = runbook(t, map[string]string{"main.hcl": variable + `
phase "A" {
  step "exec" "first" { command = ["true"] }
}
phase "B" {
  step "exec" "num" {
    command = [for s in split("7", "${var.tok}7${exec.first.exit_code}") : tonumber(s)]
  }
  step "exec" "hex" {
    command = [for c in split("", "${var.tok}${exec.first.exit_code}") : format("%x", c)]
  }
}
`})
	noPieces(t, run(t, dir, 0, "validate"))
	noPieces(t, run(t, dir, 0, "run", "--phase", "A", "--auto-approve"))
	for _, args := range [][]string{{"plan"}, {"run", "--all", "--auto-approve"}} {
		r := migrate(t, dir, args...)
		noPieces(t, r)
		if r.code == 0 || !strings.Contains(r.stderr+r.stdout, "depends on a sensitive value") {
			t.Errorf("migrate %v: want an error saying the expression depends on a sensitive value: %s", args, r)
		}
	}
}

// After a rollback a phase says "rolled back", even when a step it could
// not undo stays done; a step run again counts its attempts from 1.
func TestStatusAfterRollback(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": twoPhases})
	run(t, dir, 0, "run", "--all", "--auto-approve")
	run(t, dir, 0, "rollback", "--auto-approve")
	phases, steps := status(t, dir)
	for _, p := range []string{"A", "B"} {
		if phases[p] != "rolled back" {
			t.Errorf("phase %s after a rollback is %q, want rolled back", p, phases[p])
		}
	}
	if s := steps["exec.b2"]; s.Status != "done" {
		t.Errorf("exec.b2 cannot be undone, so it stays done: %+v", s)
	}
	run(t, dir, 0, "run", "--phase", "A", "--auto-approve")
	phases, steps = status(t, dir)
	if phases["A"] != "complete" || phases["B"] != "rolled back" {
		t.Errorf("after running A again: %v", phases)
	}
	if s := steps["exec.a1"]; s.Attempts != 1 {
		t.Errorf("exec.a1 run again after a rollback: %d attempts, want 1", s.Attempts)
	}
}

// run --all over a phase that is already complete says so, instead of a
// summary of nothing.
func TestRunAllOverCompletePhase(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": twoPhases})
	run(t, dir, 0, "run", "--phase", "A", "--auto-approve")
	r := run(t, dir, 0, "run", "--all", "--auto-approve")
	if !strings.Contains(r.stdout, "Phase A: already complete, nothing to do.") || strings.Contains(r.stdout, "Phase A complete: 0 done") {
		t.Errorf("run --all over a complete phase A: %s", r)
	}
	if !strings.Contains(r.stdout, "Phase B complete: 3 done") {
		t.Errorf("run --all: %s", r)
	}
}

// An approval that fails on a new run no longer shows who approved the
// earlier one.
func TestFailedApprovalForgetsApprover(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": approvalRunbook("switch DNS")})
	run(t, dir, 0, "run", "--all", "--auto-approve", "--approve", "approval.dns")
	if _, steps := status(t, dir); steps["approval.dns"].Facts["approved_by"] == "" {
		t.Fatalf("approval.dns: %+v", steps["approval.dns"])
	}
	// A new message is a new question: asked again, and not approved.
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(approvalRunbook("switch DNS and MX")), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, 1, "run", "--all", "--auto-approve")
	_, steps := status(t, dir)
	if s := steps["approval.dns"]; s.Status != "failed" || len(s.Facts) != 0 || s.Attempts != 1 {
		t.Errorf("approval.dns failed, but its record still shows the earlier approval: %+v", s)
	}
	if r := run(t, dir, 0, "status"); strings.Contains(r.stdout, "approved_by") {
		t.Errorf("status: %s", r)
	}
	if r := run(t, dir, 0, "state", "show"); strings.Contains(r.stdout, "approved_by") {
		t.Errorf("state show: %s", r)
	}
}

// status and state show read the state: they need no variable values.
func TestStatusNeedsNoVariables(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": `
variable "token" {
  sensitive = true
}
variable "count" { type = number }
locals { greeting = "hello ${var.count}" }
phase "A" {
  step "exec" "hello" {
    command = ["sh", "-c", "test -n \"$TOKEN\""]
    env     = { TOKEN = var.token, GREETING = local.greeting }
  }
}
`})
	run(t, dir, 0, "run", "--all", "--auto-approve", "--var", "token=s3cret", "--var", "count=2")
	r := run(t, dir, 0, "status")
	if !strings.Contains(r.stdout, "Phase A: complete") || strings.Contains(r.stderr, "Missing Required Variable") {
		t.Errorf("status without variables: %s", r)
	}
	run(t, dir, 0, "state", "show")
	run(t, dir, 0, "validate")
	if r := run(t, dir, 0, "graph", "--format", "mermaid"); !strings.Contains(r.stdout, "exec.hello") {
		t.Errorf("graph without variables: %s", r)
	}
	// Commands that run steps still need them.
	r = run(t, dir, 1, "plan")
	if !strings.Contains(r.stderr, "Missing Required Variable") {
		t.Errorf("plan without variables: %s", r)
	}
}

// A command's output is shown as it comes; its failure does not repeat it.
func TestFailureDoesNotRepeatOutput(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": `
phase "A" {
  step "exec" "copy" { command = ["sh", "-c", "cat message.txt >&2; exit 23"] }
}
`, "message.txt": "copy: /srv/photos: No such file or directory\n"})
	r := run(t, dir, 1, "run", "--all", "--auto-approve")
	if n := strings.Count(r.stdout+r.stderr, "No such file or directory"); n != 1 {
		t.Errorf("the command's message is printed %d times, want once: %s", n, r)
	}
	if !strings.Contains(r.stdout, "exited with code 23") {
		t.Errorf("run: %s", r)
	}
	// status, read later, still quotes it.
	if r := run(t, dir, 0, "status"); !strings.Contains(r.stdout, "No such file or directory") {
		t.Errorf("status: %s", r)
	}
}

// One convention for every question that lets migrate go on: only "yes".
func TestOnlyYesAccepted(t *testing.T) {
	for answer, want := range map[string]bool{"yes": true, "y": false, "Y": false, "": false, "no": false, "YES!": false} {
		if isYes(answer) != want {
			t.Errorf("isYes(%q) = %v", answer, !want)
		}
	}
}

// A provider block may use a step's outputs: the graph shows the edge it
// adds to the provider's steps, labelled, and validate refuses a reference
// to a step of a phase that runs later, with the file and line.
func TestProviderFromStepOutputs(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": `
provider "talos" "node" {
  version   = "v1.13.3"
  endpoints = ["10.0.0.${exec.boot.exit_code}"]
}
phase "platform" {
  step "exec" "boot" { command = ["true"] }
  step "talos_kubeconfig" "admin" { path = "kubeconfig.age" }
}
`})
	run(t, dir, 0, "validate")
	r := run(t, dir, 0, "graph")
	if want := `"exec.boot" -> "talos_kubeconfig.admin" [label = "provider talos.node", style = bold];`; !strings.Contains(r.stdout, want) {
		t.Errorf("graph lacks %s: %s", want, r)
	}
	if r := run(t, dir, 0, "graph", "--format", "svg"); !strings.Contains(r.stdout, `data-from="exec.boot" data-to="talos_kubeconfig.admin" data-label="provider talos.node"`) {
		t.Errorf("svg: %s", r)
	}

	later := runbook(t, map[string]string{"main.hcl": `
provider "talos" "node" {
  version   = "v1.13.3"
  endpoints = ["10.0.0.${exec.boot.exit_code}"]
}
phase "platform" {
  step "talos_kubeconfig" "admin" { path = "kubeconfig.age" }
}
phase "later" {
  step "exec" "boot" { command = ["true"] }
}
`})
	r = run(t, later, 1, "validate")
	for _, want := range []string{"Provider Configured from a Later Step", "main.hcl line 4", "exec.boot"} {
		if !strings.Contains(r.stderr+r.stdout, want) {
			t.Errorf("validate lacks %q: %s", want, r)
		}
	}
}

// The plan of a provider configured from a step that has not run: its
// steps are deferred, naming the step, and the provider is not configured
// with unknown values (which would fail: it has no socket yet).
func TestProviderFromStepOutputsPlan(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": `
provider "incus" "host" {
  socket = "/nonexistent/incus-${exec.boot.exit_code}.socket"
}
phase "platform" {
  step "exec" "boot" { command = ["true"] }
  step "incus_snapshot" "s" {
    instance = "old"
    name     = "before"
  }
}
`})
	r := run(t, dir, 0, "plan")
	for _, want := range []string{"incus.host", "(known after exec.boot)", "incus_snapshot.s"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("plan lacks %q: %s", want, r)
		}
	}
	r = run(t, dir, 0, "plan", "--json")
	if !strings.Contains(r.stdout, `"deferred": true`) || !strings.Contains(r.stdout, `"known_after"`) {
		t.Errorf("plan --json: %s", r)
	}
}

// TestAgeIdentityReachesHelmOnly: the helm provider program inherits
// MIGRATE_AGE_IDENTITY (kubernetes_secret decrypts age files with it), as
// the talos one does; an exec step's command does not, nor does either
// get a runbook variable from the environment.
func TestAgeIdentityReachesHelmOnly(t *testing.T) {
	t.Parallel()
	plugins, out := t.TempDir(), t.TempDir()
	script := fmt.Sprintf("#!/bin/sh\nprintf '%%s|%%s' \"${MIGRATE_AGE_IDENTITY:-none}\" \"${MIGRATE_VAR_tok:-none}\" > %s/helm\nexit 1\n", out)
	if err := os.WriteFile(filepath.Join(plugins, "migrate-provider-helm"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	execDir := runbook(t, map[string]string{"main.hcl": fmt.Sprintf(`
variable "tok" { default = "x" }
phase "old" {
  step "exec" "env" {
    command = ["sh", "-c", "printf '%%s|%%s' \"$${MIGRATE_AGE_IDENTITY:-none}\" \"$${MIGRATE_VAR_tok:-none}\" > %s/exec"]
  }
}
`, out)})
	helmDir := runbook(t, map[string]string{"main.hcl": `
variable "tok" { default = "x" }
phase "new" {
  step "kubernetes_secret" "key" {
    namespace = "matrix"
    name      = "signing-key"
    data      = { k = var.tok }
  }
}
`})
	migrateEnv := func(dir string, args ...string) {
		cmd := exec.Command(bin, append([]string{"--runbook", dir}, args...)...)
		cmd.Env = append(os.Environ(), "MIGRATE_PLUGIN_DIR="+plugins, "MIGRATE_AGE_IDENTITY=AGE-SECRET-KEY-1TESTONLY", "MIGRATE_VAR_tok=var-value")
		b, _ := cmd.CombinedOutput()
		t.Logf("migrate %v:\n%s", args, b)
	}
	migrateEnv(execDir, "run", "--all", "--auto-approve")
	migrateEnv(helmDir, "plan")
	for file, want := range map[string]string{"exec": "none|none", "helm": "AGE-SECRET-KEY-1TESTONLY|none"} {
		got, err := os.ReadFile(filepath.Join(out, file))
		if err != nil {
			t.Fatalf("%s did not run: %v", file, err)
		}
		if string(got) != want {
			t.Errorf("%s saw %q, want %q", file, got, want)
		}
	}
}
