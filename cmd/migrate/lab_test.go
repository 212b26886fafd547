package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestShellQuote: what `lab env` prints survives a POSIX shell's eval.
func TestShellQuote(t *testing.T) {
	for _, s := range []string{"/tmp/lab/incus", "http://127.0.0.1:8080", "/tmp/a dir/it's", "", "$HOME `x` \"q\""} {
		out, err := exec.Command("sh", "-c", "eval \"export V=$1\"; printf %s \"$V\"", "sh", shellQuote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("shellQuote(%q) = %s: the shell read %q (%v)", s, shellQuote(s), out, err)
		}
	}
	if q := shellQuote("/tmp/lab/incus"); q != "/tmp/lab/incus" {
		t.Errorf("a plain path is quoted: %s", q)
	}
}

// TestLabEnvWithoutLab: `lab env` where no lab runs fails and says how
// to start one.
func TestLabEnvWithoutLab(t *testing.T) {
	dir := t.TempDir()
	out, err := exec.Command(bin, "lab", "env", "--dir", dir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no lab runs in "+dir) || !strings.Contains(string(out), "migrate lab serve --dir "+dir) {
		t.Errorf("lab env without a lab: %v\n%s", err, out)
	}
}

// TestLabServeWithoutProgram: without migrate-lab beside migrate or in
// PATH, `lab serve` says where it looked and how to build it.
func TestLabServeWithoutProgram(t *testing.T) {
	cmd := exec.Command(bin, "lab", "serve", "--dir", t.TempDir())
	cmd.Env = []string{"PATH=/nonexistent", "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "migrate-lab") || !strings.Contains(string(out), "go install ./cmd/migrate-lab") {
		t.Errorf("lab serve without migrate-lab: %v\n%s", err, out)
	}
}
