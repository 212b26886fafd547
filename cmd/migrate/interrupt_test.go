package main

import (
	"bufio"
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// waitFile waits for a file a step makes, with a generous deadline.
func waitFile(t *testing.T, path string, out, errb *bytes.Buffer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear:\n%s\n%s", path, out, errb)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// start starts migrate in the background, as a user would.
func start(t *testing.T, dir string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--runbook", dir}, args...)...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, &out, &errb
}

// TestRevertKilledRunsAgain is issue 8's scenario: a revert that removes
// the step's creates path first and more after is killed in between; the
// next rollback must run it again, not count it done because the creates
// path is gone.
func TestRevertKilledRunsAgain(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": `
phase "A" {
  step "exec" "s" {
    command = ["sh", "-c", "touch other; touch m"]
    creates = "m"
    revert  = ["sh", "-c", "rm -f m; touch reverting; while [ ! -e go ]; do sleep 0.05; done; rm -f other"]
  }
}
`})
	run(t, dir, 0, "run", "--all", "--auto-approve")
	rb, out, errb := start(t, dir, "rollback", "--auto-approve")
	waitFile(t, filepath.Join(dir, "reverting"), out, errb)
	rb.Process.Signal(syscall.SIGKILL)
	rb.Wait()
	if _, steps := status(t, dir); steps["exec.s"].Status != "reverting" {
		t.Fatalf("after the kill exec.s is %q, want reverting", steps["exec.s"].Status)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, 0, "rollback", "--auto-approve")
	if _, err := os.Stat(filepath.Join(dir, "other")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the interrupted revert was not run again: other is still there (%v)", err)
	}
	if _, steps := status(t, dir); steps["exec.s"].Status != "reverted" {
		t.Errorf("exec.s is %q, want reverted", steps["exec.s"].Status)
	}
}

// TestStepsDoNotInheritSecrets: MIGRATE_VAR_* reaches a step only when
// its env passes it.
func TestStepsDoNotInheritSecrets(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": `
variable "tok" {
  type      = string
  sensitive = true
}
phase "A" {
  step "exec" "dump" { command = ["sh", "-c", "env > f"] }
  step "exec" "given" {
    command = ["sh", "-c", "echo \"$TOK\" > g"]
    env     = { TOK = var.tok }
  }
}
`})
	cmd := exec.Command(bin, "--runbook", dir, "run", "--all", "--auto-approve")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "MIGRATE_VAR_tok=s3cret-canary")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	f, err := os.ReadFile(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(f, []byte("s3cret-canary")) || bytes.Contains(f, []byte("MIGRATE_VAR_")) {
		t.Errorf("a step that does not use the variable got it:\n%s", f)
	}
	if !bytes.Contains(f, []byte("PATH=")) {
		t.Errorf("the step lost the rest of the environment:\n%s", f)
	}
	g, err := os.ReadFile(filepath.Join(dir, "g"))
	if err != nil || strings.TrimSpace(string(g)) != "s3cret-canary" {
		t.Errorf("a step given the variable through env got %q (%v)", g, err)
	}
}

// TestHangupStopsGently: SIGHUP (an SSH session that drops) is handled as
// SIGTERM is: the running step finishes and is recorded done, no step
// starts after it, and migrate exits 130, although its output, a pipe
// whose reader went away with the session, fails every write after the
// hangup. The hangup comes twice (the kernel, the shell) and still does
// not abort.
func TestHangupStopsGently(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": `
phase "A" {
  step "exec" "wait" {
    command = ["sh", "-c", "touch started; while [ ! -e go ]; do sleep 0.05; done; echo finishing; touch finished"]
  }
  step "exec" "next" {
    command    = ["touch", "next"]
    depends_on = [exec.wait]
  }
}
`})
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--runbook", dir, "run", "--all", "--auto-approve")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { cmd.Process.Kill() })
	var mu sync.Mutex
	var out strings.Builder
	stopping := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			mu.Lock()
			out.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.Contains(sc.Text(), "Stopping after the running steps finish") {
				close(stopping)
			}
		}
	}()
	output := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }
	var none bytes.Buffer
	waitFile(t, filepath.Join(dir, "started"), &none, &none)

	cmd.Process.Signal(syscall.SIGHUP)
	cmd.Process.Signal(syscall.SIGHUP)
	select {
	case <-stopping:
	case <-time.After(30 * time.Second):
		t.Fatalf("migrate did not say it stops after a hangup:\n%s", output())
	}
	r.Close() // the session is gone, and with it the reader of the output
	<-read
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("migrate did not exit after the hangup and the end of its step")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("after a hangup migrate ended with %v, want exit 130\n%s", err, output())
	}
	if _, err := os.Stat(filepath.Join(dir, "finished")); err != nil {
		t.Errorf("the running step did not finish: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "next")); err == nil {
		t.Errorf("a step started after the hangup")
	}
	_, steps := status(t, dir)
	if steps["exec.wait"].Status != "done" || steps["exec.next"].Status != "pending" {
		t.Errorf("after the hangup: wait is %q (want done), next is %q (want pending)", steps["exec.wait"].Status, steps["exec.next"].Status)
	}
}

// TestCtrlCEndsAWaitAtOnce is issue 17's scenario: one Ctrl-C while a
// ten-minute pause and a ten-minute readiness poll run beside a command.
// migrate does not wait them out: the command finishes and is done, the
// two waits end at once and are not done (pending, and no failure), and
// migrate exits 130 within moments; the same command, run again, waits
// again and completes the phase, the command not run twice.
func TestCtrlCEndsAWaitAtOnce(t *testing.T) {
	t.Parallel()
	var up atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !up.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	dir := runbook(t, map[string]string{"main.hcl": `
variable "pause" {}
variable "url" {}
phase "A" {
  step "exec" "effect" {
    command = ["sh", "-c", "touch started; while [ ! -e go ]; do sleep 0.05; done; echo made >> made"]
  }
  step "wait" "settle" {
    duration = var.pause
  }
  step "http_check" "ready" {
    url      = var.url
    timeout  = "10m"
    interval = "1s"
  }
  step "exec" "after" {
    command    = ["touch", "after"]
    depends_on = [wait.settle, http_check.ready]
  }
}
`})
	vars := []string{"--var", "url=" + srv.URL + "/healthz"}
	cmd, out, errb := start(t, dir, append([]string{"run", "--all", "--auto-approve", "--no-color", "--var", "pause=10m"}, vars...)...)
	waitFile(t, filepath.Join(dir, "started"), out, errb)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, steps := status(t, dir); steps["wait.settle"].Status == "running" && steps["http_check.ready"].Status == "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waits did not start:\n%s\n%s", out, errb)
		}
		time.Sleep(50 * time.Millisecond)
	}

	sigint := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	// The command is still at work: let it finish, a moment later.
	time.Sleep(300 * time.Millisecond)
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("migrate did not exit after one Ctrl-C:\n%s\n%s", out, errb)
	}
	took := time.Since(sigint)
	t.Logf("one Ctrl-C: migrate exited %s after it (the command beside the waits took 300ms of that to finish)", took.Round(time.Millisecond))
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("after one Ctrl-C migrate ended with %v, want exit 130\n%s\n%s", err, out, errb)
	}
	if took > 10*time.Second {
		t.Errorf("migrate took %s to stop after one Ctrl-C, want moments (the waits are 10 minutes)", took)
	}
	for _, want := range []string{"Stopping after the running steps finish (steps that only wait stop now, not done)", "run the same command again to resume"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb)
		}
	}
	for _, want := range []string{"wait.settle: not done: stopped while it waited", "http_check.ready: not done: stopped while it waited", "exec.effect: done", "Phase A interrupted: 1 done, 2 stopped while waiting, 0 failed, 0 skipped"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out.String(), "failed:") {
		t.Errorf("a stop is no failure, but the output says one:\n%s", out)
	}
	phases, steps := status(t, dir)
	if phases["A"] != "in progress" {
		t.Errorf("phase A is %q, want in progress", phases["A"])
	}
	for addr, want := range map[string]string{"exec.effect": "done", "wait.settle": "pending", "http_check.ready": "pending", "exec.after": "pending"} {
		if got := steps[addr].Status; got != want {
			t.Errorf("after one Ctrl-C %s is %q, want %q", addr, got, want)
		}
	}
	r := run(t, dir, 0, "status")
	if !strings.Contains(r.stdout, "Step Interrupted: wait.settle was stopped before it finished: the first interrupt stops a step that only waits") {
		t.Errorf("status does not say why the wait is not done:\n%s", r.stdout)
	}

	// The same command again (the pause now short, the URL up): the waits
	// are done this time, the command is not run again.
	up.Store(true)
	run(t, dir, 0, append([]string{"run", "--all", "--auto-approve", "--var", "pause=0s"}, vars...)...)
	_, steps = status(t, dir)
	for _, addr := range []string{"exec.effect", "wait.settle", "http_check.ready", "exec.after"} {
		if got := steps[addr].Status; got != "done" {
			t.Errorf("after the resumed run %s is %q, want done", addr, got)
		}
	}
	if made, _ := os.ReadFile(filepath.Join(dir, "made")); string(made) != "made\n" {
		t.Errorf("the command ran %d times, want once", strings.Count(string(made), "made"))
	}
}
