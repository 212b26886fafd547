package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/lab/sandbox"
)

// run runs spec and returns its exit code, stdout and stderr.
func run(t *testing.T, spec sandbox.Spec) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := sandbox.Command(ctx, spec)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, stdout.String(), stderr.String()
}

func TestCommand(t *testing.T) {
	t.Parallel()
	root, data, ro := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "in"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, sandbox.Spec{
		Root:  root,
		Binds: []sandbox.Bind{{Source: data, Path: "/var/mnt/data"}, {Source: ro, Path: "/ro", ReadOnly: true}},
		Argv: []string{"sh", "-c", `cat /var/mnt/data/in; echo "$GREETING" > /var/mnt/data/out; pwd; echo $$
			touch /usr/sandbox-probe 2>/dev/null && echo usr-writable
			touch /ro/probe 2>/dev/null && echo ro-writable
			mount -o remount,bind,rw /usr 2>/dev/null && echo usr-remounted
			exit 0`},
		Env: []string{"PATH=/usr/bin:/bin", "GREETING=hello"},
		Dir: "/work/dir",
	})
	if code != 0 || out != "from the host\n/work/dir\n1\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(data, "out")); err != nil || string(b) != "hello\n" {
		t.Fatalf("the command's write through the bind: %q %v", b, err)
	}
	for _, p := range []string{"/usr/sandbox-probe", filepath.Join(ro, "probe")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s written from the sandbox", p)
		}
	}
	// the mounts were the sandbox's: none is left on the host's root dir
	if ents, _ := os.ReadDir(filepath.Join(root, "usr")); len(ents) != 0 {
		t.Errorf("the host's /usr still mounted in the root after the command: %d entries", len(ents))
	}
}

func TestCommandExitCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		argv   []string
		code   int
		stderr string
	}{
		{[]string{"sh", "-c", "exit 3"}, 3, ""},
		{[]string{"false"}, 1, ""},
		{[]string{"no-such-command", "x"}, sandbox.NotFound, "no-such-command: command not found"},
	} {
		code, _, errOut := run(t, sandbox.Spec{Root: t.TempDir(), Argv: tc.argv})
		if code != tc.code || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("%q: exit %d, stderr %q; want %d, %q", tc.argv, code, errOut, tc.code, tc.stderr)
		}
	}
}

func TestCommandMissingBind(t *testing.T) {
	t.Parallel()
	code, _, errOut := run(t, sandbox.Spec{Root: t.TempDir(), Argv: []string{"true"},
		Binds: []sandbox.Bind{{Source: "/nonexistent/dir", Path: "/data"}}})
	if code != sandbox.NotFound || !strings.Contains(errOut, `Missing source path "/nonexistent/dir"`) {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

// An overlay layer: the lower directory is read, never written; every
// change (a new file, an edit, a removal) lands in the upper one; the
// host's /usr is not bound where the layer is.
func TestCommandOverlay(t *testing.T) {
	t.Parallel()
	root, lower, dir := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(lower, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"bin/sh-probe": "lower\n", "gone": "lower\n"} {
		if err := os.WriteFile(filepath.Join(lower, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	busybox, err := exec.LookPath("busybox") // static: the root's /usr has no loader
	if err != nil {
		t.Fatal("no busybox: install busybox-static (scripts/incus-up.sh does)")
	}
	code, out, errOut := run(t, sandbox.Spec{
		Root:  root,
		Binds: []sandbox.Bind{{Source: lower, Path: "/usr", Upper: upper, Work: work}, {Source: busybox, Path: "/busybox", ReadOnly: true}},
		Argv: []string{"/busybox", "sh", "-c", `read x < /usr/bin/sh-probe; echo "$x"; echo upper > /usr/bin/sh-probe; echo new > /usr/new
			/busybox rm /usr/gone; /busybox ls /usr`},
	})
	if code != 0 || out != "lower\nbin\nnew\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for name, want := range map[string]string{"bin/sh-probe": "lower\n", "gone": "lower\n"} {
		if b, err := os.ReadFile(filepath.Join(lower, name)); err != nil || string(b) != want {
			t.Errorf("the lower layer's %s: %q %v", name, b, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(upper, "bin", "sh-probe")); err != nil || string(b) != "upper\n" {
		t.Errorf("the upper layer's bin/sh-probe: %q %v", b, err)
	}
}
