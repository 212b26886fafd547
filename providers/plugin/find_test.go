package plugin_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/fake"
	"github.com/homelab-migrate/migrate/providers/plugin"
)

// upper is the test program's command (plugin.ServeCommand): its input
// in capitals.
func upper(stdin io.Reader, stdout io.Writer) error {
	b, err := io.ReadAll(stdin)
	if err != nil {
		return err
	}
	_, err = stdout.Write(bytes.ToUpper(b))
	return err
}

// script writes an executable shell script to dir/name and returns its
// path and sha256.
func script(t *testing.T, dir, name, body string) (string, string) {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, sum([]byte(body))
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestTamperedProgramRefused: a program whose bytes differ from the sum
// migrate recorded is refused, by name, with both sums and the fix; the
// original is accepted and said verified.
func TestTamperedProgramRefused(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(plugin.PluginDirEnv, dir)
	path, want := script(t, dir, "migrate-provider-x", "#!/bin/sh\necho hello\n")
	prog := plugin.Program{Name: "x", Command: "migrate-provider-x", Sum: want, Schema: fake.Schema()}
	got, err := plugin.Check(prog)
	if err != nil || got != (providers.Program{Provider: "x", Path: path, SHA256: want, Verified: true}) {
		t.Fatalf("the recorded program: %+v, %v", got, err)
	}
	tampered := "#!/bin/sh\necho hello; cat ~/.config/migrate/age.key\n"
	if err := os.WriteFile(path, []byte(tampered), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = plugin.Check(prog)
	for _, w := range []string{path, want, sum([]byte(tampered)), "make build"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("a tampered program: the error lacks %q: %v", w, err)
		}
	}
	r := plugin.Factory(prog)().Configure(context.Background(), providers.ConfigureRequest{Name: "x"})
	if !r.Diagnostics.HasErrors() || !strings.Contains(r.Diagnostics.Err().Error(), sum([]byte(tampered))) {
		t.Errorf("Configure with a tampered program: %v", r.Diagnostics)
	}
}

// TestSharedProgramRefused: a program its group or everyone may write,
// or one in a directory they may write, is refused with the chmod that
// mends it, whatever its sum.
func TestSharedProgramRefused(t *testing.T) {
	for _, c := range []struct {
		name          string
		file, dirMode os.FileMode
		culprit       string // "file" or "dir"
	}{
		{"world-writable program", 0o757, 0o755, "file"},
		{"group-writable program", 0o775, 0o755, "file"},
		{"world-writable directory", 0o755, 0o777, "dir"},
		{"group-writable directory", 0o755, 0o775, "dir"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bin")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			path, s := script(t, dir, "migrate-provider-x", "#!/bin/sh\n")
			for p, m := range map[string]os.FileMode{path: c.file, dir: c.dirMode} {
				if err := os.Chmod(p, m); err != nil { // not the umask's say
					t.Fatal(err)
				}
			}
			_, err := plugin.Check(plugin.Program{Name: "x", Command: path, Sum: s})
			culprit := map[string]string{"file": path, "dir": dir}[c.culprit]
			if err == nil || !strings.Contains(err.Error(), "writable by its group or by everyone") || !strings.Contains(err.Error(), "chmod go-w "+culprit) {
				t.Fatalf("%s: %v", c.name, err)
			}
		})
	}
}

// TestNoPathFallback: a program that is only in PATH is not run, and the
// error says where migrate looked and what to do.
func TestNoPathFallback(t *testing.T) {
	inPath := t.TempDir()
	_, s := script(t, inPath, "migrate-provider-x", "#!/bin/sh\n")
	t.Setenv("PATH", inPath)
	empty := t.TempDir()
	t.Setenv(plugin.PluginDirEnv, empty)
	_, err := plugin.Check(plugin.Program{Name: "x", Command: "migrate-provider-x", Sum: s})
	for _, w := range []string{"migrate does not look in PATH", empty, "make build", plugin.PluginDirEnv} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("a program only in PATH: the error lacks %q: %v", w, err)
		}
	}
}

// TestUnsummedBuild: without a recorded sum (a build by go build), a
// program is taken only from $MIGRATE_PLUGIN_DIR, and said unverified;
// not beside migrate, and not without the variable, which the error
// says along with make build.
func TestUnsummedBuild(t *testing.T) {
	t.Setenv(plugin.PluginDirEnv, "")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	beside := plugin.Program{Name: "fake", Command: filepath.Base(exe)}
	if _, err := plugin.Check(beside); err == nil || !strings.Contains(err.Error(), "built without the sums") || !strings.Contains(err.Error(), "make build") {
		t.Fatalf("a program beside migrate, no sums: %v", err)
	}
	dir := t.TempDir()
	path, s := script(t, dir, "migrate-provider-x", "#!/bin/sh\n")
	t.Setenv(plugin.PluginDirEnv, dir)
	got, err := plugin.Check(plugin.Program{Name: "x", Command: "migrate-provider-x"})
	if err != nil || got != (providers.Program{Provider: "x", Path: path, SHA256: s, Verified: false}) {
		t.Fatalf("a program in MIGRATE_PLUGIN_DIR, no sums: %+v, %v", got, err)
	}
}

// TestRunsWhatWasChecked: the program that runs is the file whose sum was
// checked, even when its path is given another program right after.
func TestRunsWhatWasChecked(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "migrate-provider-fake")
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	prog := plugin.Program{Name: "fake", Command: path, Sum: sum(b), Schema: fake.Schema()}
	found, err := plugin.Find(prog)
	if err != nil {
		t.Fatal(err)
	}
	defer found.Close()
	evil, _ := script(t, dir, "evil", "#!/bin/sh\necho evil\n")
	if err := os.Rename(evil, path); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MIGRATE_PLUGIN_TEST", "command")
	out, err := found.Output("checked")
	if err != nil || !strings.Contains(string(out), `"provider":"fake"`) || !strings.HasSuffix(string(out), "CHECKED") {
		t.Fatalf("the program checked, then replaced at its path, ran as %q, %v", out, err)
	}
	// Looked for again, the new file is refused.
	if _, err := plugin.Run(context.Background(), prog, nil); err == nil || !strings.Contains(err.Error(), "not the fake provider's program") {
		t.Fatalf("a program replaced after a check: %v", err)
	}
}

// TestRunIntroduces: Run checks the handshake of a one-shot command as
// a provider's, and returns what follows it.
func TestRunIntroduces(t *testing.T) {
	t.Setenv("MIGRATE_PLUGIN_TEST", "command")
	out, err := plugin.Run(context.Background(), program(t), []byte("bundle\nno newline at the end"))
	if err != nil || string(out) != "BUNDLE\nNO NEWLINE AT THE END" {
		t.Fatalf("Run = %q, %v", out, err)
	}
	dir := t.TempDir()
	bare, _ := script(t, dir, "migrate-provider-bare", "#!/bin/sh\necho 'cluster: keys'\n")
	_, err = plugin.Run(context.Background(), plugin.Program{Name: "fake", Command: bare, Schema: fake.Schema()}, nil)
	if err == nil || !strings.Contains(err.Error(), "did not answer like a migrate provider program") {
		t.Fatalf("Run of a program without the handshake: %v", err)
	}
	other := fake.Schema()
	other.StepTypes = nil
	_, err = plugin.Run(context.Background(), plugin.Program{Name: "fake", Command: program(t).Command, Schema: other}, nil)
	if err == nil || !strings.Contains(err.Error(), "from another build of migrate") {
		t.Fatalf("Run of a program of another schema: %v", err)
	}
}

// TestProgramKeepsItsName: run through /proc/self/fd, a program is named
// as its file in ps and top, not "3".
func TestProgramKeepsItsName(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("programs run through /proc/self/fd on Linux only")
	}
	prog := program(t)
	r := apply(context.Background(), configured(t, prog), "pid", nil)
	if r.Diagnostics.HasErrors() {
		t.Fatal(r.Diagnostics.Err())
	}
	comm, err := os.ReadFile("/proc/" + r.Outputs.GetAttr("value").AsString() + "/comm")
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Base(prog.Command)
	if len(want) > 15 { // the kernel keeps 15 bytes
		want = want[:15]
	}
	if got := strings.TrimSpace(string(comm)); got != want {
		t.Errorf("the program is called %q in ps, want %q", got, want)
	}
}
