package examples

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestCopyTakesOnlyTrackedFiles: what a walk-through leaves in an example
// directory (its state, rendered files) is not copied into the tests' runs.
func TestCopyTakesOnlyTrackedFiles(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	write := func(rel, text string) {
		t.Helper()
		p := filepath.Join(src, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("main.hcl", "# tracked\n")
	write("patches/node.yaml", "kind: HostnameConfig\n")
	for _, args := range [][]string{{"init", "-q"}, {"add", "main.hcl", "patches/node.yaml"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	write(".migrate/state.json", `{"version": 99}`)
	write("rendered/kubeconfig", "left by a walk-through\n")
	write("lab/old-vm/RUNNING", "")

	dst := filepath.Join(t.TempDir(), "copy")
	copyTracked(t, src, dst)
	for _, rel := range []string{"main.hcl", "patches/node.yaml"} {
		if _, err := os.Stat(filepath.Join(dst, rel)); err != nil {
			t.Errorf("tracked file not copied: %v", err)
		}
	}
	for _, rel := range []string{".migrate", "rendered", "lab"} {
		if _, err := os.Stat(filepath.Join(dst, rel)); !os.IsNotExist(err) {
			t.Errorf("%s was copied (err %v); only what git tracks should be", rel, err)
		}
	}
}
