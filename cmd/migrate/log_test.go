package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A step whose error is 50 MB (a command that does not exist, with a
// 50 MB argument) leaves a small state and a small terminal; the log in
// .migrate/logs has the whole error.
func TestHugeErrorIsCutAndLogged(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("x", 50<<20)
	dir := runbook(t, map[string]string{
		"arg.txt": huge,
		"main.hcl": `
phase "A" {
  step "exec" "big" { command = ["no-such-command-for-migrate", file("arg.txt")] }
}
`})
	r := run(t, dir, 1, "run", "--all", "--auto-approve")
	if n := len(r.stdout) + len(r.stderr); n > 64<<10 {
		t.Errorf("the terminal got %d bytes", n)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, ".migrate", "logs", "*-run.log"))
	if len(logs) != 1 {
		t.Fatalf("logs: %v, want one run log", logs)
	}
	if !strings.Contains(r.stdout, "bytes cut; full error in "+logs[0]+")") {
		t.Errorf("the terminal does not point at the log: %s", r.stdout[:min(len(r.stdout), 20000)])
	}
	if fi, err := os.Stat(filepath.Join(dir, ".migrate", "state.json")); err != nil || fi.Size() > 16<<10 {
		t.Errorf("state.json: %v, %d bytes", err, fi.Size())
	}
	_, steps := status(t, dir)
	if s := steps["exec.big"]; s.Status != "failed" {
		t.Errorf("exec.big: %+v", s)
	}
	fi, err := os.Stat(logs[0])
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("log: %v, mode %v, want 0600", err, fi.Mode())
	}
	b, _ := os.ReadFile(logs[0])
	if !bytes.Contains(b, []byte("no-such-command-for-migrate "+huge+" could not be started")) {
		t.Errorf("the log (%d bytes) does not have the whole error", len(b))
	}
	if !bytes.Contains(b, []byte(" end: phase A did not complete")) {
		t.Errorf("the log does not say how the run ended: %q", b[max(0, len(b)-300):])
	}
}
