package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/lab/labenv"
)

// bin is migrate-lab, built once, alone in its directory.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "migrate-lab-test")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "migrate-lab")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		os.Stderr.Write(out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// lab runs migrate-lab with args and a PATH without migrate.
func lab(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=/nonexistent", "HOME=" + t.TempDir(), "TMPDIR=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestEnvWithoutLab: env where no lab runs fails and says how to start one.
func TestEnvWithoutLab(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, err := lab(t, "env", "--dir", dir)
	if err == nil || !strings.Contains(out, "no lab runs in "+dir) || !strings.Contains(out, "migrate-lab serve --dir "+dir) {
		t.Errorf("env without a lab: %v\n%s", err, out)
	}
}

// TestReserveWithoutLab: reserve where no lab runs fails and says how to
// start one.
func TestReserveWithoutLab(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, err := lab(t, "reserve", "--dir", dir, "10:66:6a:00:00:01", "127.30.200.50")
	if err == nil || !strings.Contains(out, "no lab's router in "+dir) || !strings.Contains(out, "migrate-lab serve --dir "+dir) {
		t.Errorf("reserve without a lab: %v\n%s", err, out)
	}
}

// TestServeWhereALabRuns: a second lab in the same directory is refused
// before it touches anything.
func TestServeWhereALabRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0") // its Incus host answers
	if err != nil {
		t.Fatal(err)
	}
	conf := labenv.ClientConfig(dir)
	if err := labenv.Write(dir, l.Addr().String(), []string{"INCUS_CONF=" + conf}); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	out, err := lab(t, "serve", "--dir", dir)
	if err == nil || !strings.Contains(out, "a lab already runs in "+dir) {
		t.Errorf("serve where a lab runs: %v\n%s", err, out)
	}
	out, err = lab(t, "env", "--dir", dir)
	if err != nil || out != "export INCUS_CONF="+conf+"\n" {
		t.Errorf("env of the running lab: %v\n%s", err, out)
	}
}

// TestDemoWithoutMigrate: without migrate beside migrate-lab or in PATH,
// the demo says where it looked and how to build it, before anything.
func TestDemoWithoutMigrate(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "demo")
	out, err := lab(t, "demo", "--dir", dir)
	if err == nil || !strings.Contains(out, "the demo drives migrate") || !strings.Contains(out, "make build") {
		t.Errorf("demo without migrate: %v\n%s", err, out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the demo made its directory before refusing: %v", err)
	}
}

// TestUsage: a missing or unknown subcommand, a stray argument and the
// old flag-only form are errors that say what to type.
func TestUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "usage: migrate-lab serve|env|reserve|demo"},
		{[]string{"reserve", "10:66:6a:00:00:01"}, "give the ADDRESS to reserve for 10:66:6a:00:00:01, or --remove"},
		{[]string{"bogus"}, `unknown command "bogus" for "migrate-lab"`},
		{[]string{"serve", "extra"}, `unknown command "extra" for "migrate-lab serve"`},
		{[]string{"env", "--address-block", "3"}, "unknown flag: --address-block"},
		{[]string{"--dir", "/tmp/x"}, "unknown flag: --dir"},
	} {
		out, err := lab(t, c.args...)
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(out, "Error: "+c.want) {
			t.Errorf("migrate-lab %s: %v, want exit 1 and %q:\n%s", strings.Join(c.args, " "), err, c.want, out)
		}
	}
	if out, err := lab(t, "--help"); err != nil || !strings.Contains(out, "serve") || !strings.Contains(out, "demo") {
		t.Errorf("--help: %v\n%s", err, out)
	}
}
