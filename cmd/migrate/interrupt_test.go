package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
