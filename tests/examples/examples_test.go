// Package examples runs the runbooks under examples/ end to end with the
// real migrate binary, as the README tells people to.
package examples

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/lab/talosnode"
	"github.com/homelab-migrate/migrate/tests/buildmigrate"
)

// migrate and migrateLab are the programs built for the tests, beside
// the provider programs.
var migrate, migrateLab string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "migrate-examples")
	if err != nil {
		panic(err)
	}
	migrate, migrateLab = filepath.Join(dir, "migrate"), filepath.Join(dir, "migrate-lab")
	// The Talos and Helm providers and the lab run as programs found beside
	// migrate, which is built as make build does: with their sums.
	if err := buildmigrate.Build(dir, "cmd/migrate-lab"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// copyExample copies what git tracks of examples/NAME into a temporary
// directory: runs leave the checkout clean, and whatever a walk-through
// left in the example (.migrate/, rendered/) stays out of the tests.
func copyExample(t testing.TB, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), name)
	copyTracked(t, filepath.Join("../../examples", name), dst)
	return dst
}

// copyTracked copies the files of src that git tracks to dst, keeping
// their modes. (A new file must be git-added to be seen.)
func copyTracked(t testing.TB, src, dst string) {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached")
	cmd.Dir = src
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files in %s (the tests need a git checkout): %v", src, err)
	}
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if rel == "" {
			continue
		}
		fi, err := os.Stat(filepath.Join(src, rel))
		if os.IsNotExist(err) {
			continue // deleted but not yet committed
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, rel), b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

func run(t testing.TB, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(migrate, append(args, "--runbook", dir, "--no-color")...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("migrate %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

func TestQuickstart(t *testing.T) {
	t.Parallel()
	dir := copyExample(t, "quickstart")
	lab := filepath.Join(t.TempDir(), "lab")
	env := []string{"MIGRATE_VAR_lab=" + lab}
	run(t, dir, env, "run", "--all", "--auto-approve", "--approve", "approval.cleanup")
	if _, err := os.Stat(filepath.Join(lab, "old-vm/STOPPED")); err != nil {
		t.Errorf("the old VM was not stopped: %v", err)
	}
	if out := run(t, dir, env, "plan"); !strings.Contains(out, "0 to create, 0 to update, 0 drifted") {
		t.Errorf("plan after the run is not empty:\n%s", out)
	}
	run(t, dir, env, "rollback", "--auto-approve")
	if _, err := os.Stat(filepath.Join(lab, "old-vm/RUNNING")); err != nil {
		t.Errorf("rollback did not bring the old VM back: %v", err)
	}
	if _, err := os.Stat(filepath.Join(lab, "talos-node")); !os.IsNotExist(err) {
		t.Errorf("rollback left the new node behind: %v", err)
	}
}

func TestTalosPlatform(t *testing.T) {
	t.Parallel()
	labDir := t.TempDir()
	node, err := talosnode.New(talosnode.Options{Dir: labDir})
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Stop)
	dir := copyExample(t, "talos-platform")
	identity := filepath.Join(t.TempDir(), "age.key")
	keygen := exec.Command("go", "run", "filippo.io/age/cmd/age-keygen", "-o", identity)
	if out, err := keygen.CombinedOutput(); err != nil {
		t.Fatalf("age-keygen: %v\n%s", err, out)
	}
	env := []string{"MIGRATE_AGE_IDENTITY=" + identity}
	vars := []string{"--var", "lab=" + labDir}
	before := node.Config()
	treeBefore := tree(t, dir)

	out := run(t, dir, env, append([]string{"plan"}, vars...)...)
	// The plan names the program it runs: the one beside migrate, verified.
	talos := "talos: " + filepath.Join(filepath.Dir(migrate), "migrate-provider-talos") + " (sha256 "
	for _, want := range []string{"config diff", "ExternalVolumeConfig", "metal-installer/dc8730aa8cc7bfa5ef7e2b3284248f2631135b2faf4ae11aa997a0c1987b0eee:v1.13.3",
		talos, "the one this migrate was built with"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	// plan has no side effects: the rendered config is written by run.
	if after := tree(t, dir); !maps.Equal(treeBefore, after) {
		t.Errorf("plan changed the runbook directory:\nbefore %v\nafter  %v", treeBefore, after)
	}
	rendered := filepath.Join(labDir, "rendered/controlplane.yaml")
	if _, err := os.Stat(rendered); !os.IsNotExist(err) {
		t.Errorf("plan wrote the rendered config: %v", err)
	}
	run(t, dir, env, append([]string{"run", "--phase", "platform", "--auto-approve"}, vars...)...)
	if b, err := os.ReadFile(rendered); err != nil || !strings.Contains(string(b), "(sensitive value)") || strings.Contains(string(b), "PRIVATE KEY") {
		t.Errorf("run did not write the rendered config with its secrets redacted: %v", err)
	}
	if fi, err := os.Stat(rendered); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("rendered config: %v", err)
	}
	if !strings.Contains(string(node.Config()), "incus_data") {
		t.Error("the node does not run the patched config")
	}
	if fi, err := os.Stat(filepath.Join(labDir, "rendered/kubeconfig")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig: %v", err)
	}
	run(t, dir, env, append([]string{"rollback", "--auto-approve"}, vars...)...)
	if !bytes.Equal(node.Config(), before) {
		t.Error("rollback did not bring the node's previous config back")
	}
}

// TestHomelabIsValid: the brief's whole migration loads with every
// provider's schema and no diagnostic at all, and its graph orders the
// rehearsal and the five phases as written, in every format.
func TestHomelabIsValid(t *testing.T) {
	t.Parallel()
	dir := copyExample(t, "homelab")
	env := []string{"MIGRATE_AGE_IDENTITY=" + filepath.Join(dir, "secrets/demo-identity.txt")}
	if out := run(t, dir, env, "validate"); !regexp.MustCompile(`^The runbook is valid: 6 phases, \d+ steps\.\n$`).MatchString(out) {
		t.Errorf("validate with the demo identity, want no diagnostics: %q", out)
	}
	out := run(t, dir, env, "graph", "--format", "mermaid")
	for _, want := range []string{"rehearsal", "platform", "data-apps", "host-services", "ingress-matrix", "cleanup", `["group.jellyfin"]`, `["helm_release.app"]`, "incus_instance.rehearsal_deleted"} {
		if !strings.Contains(out, want) {
			t.Errorf("graph lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "demo-registration") || strings.Contains(out, "AGE-SECRET") {
		t.Error("the graph shows a secret")
	}
	if out := run(t, dir, env, "graph", "--format", "dot"); !strings.HasPrefix(out, "digraph") || !strings.Contains(out, "kubernetes_job.rehearsal_write") {
		t.Errorf("graph --format dot: %s", out)
	}
	// Reading the runbook's shape needs no identity and no variable values.
	run(t, dir, []string{"MIGRATE_AGE_IDENTITY="}, "validate")
	if out := run(t, dir, []string{"MIGRATE_AGE_IDENTITY="}, "graph", "--format", "svg"); !strings.Contains(out, "</svg>") {
		t.Errorf("graph --format svg without the identity: %s", out)
	}
}

// tree lists the files under dir with their size, time and mode: what a
// command without side effects leaves as it was.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := d.Info()
		out[p] = fmt.Sprint(fi.Size(), fi.ModTime().UnixNano(), fi.Mode())
		return nil
	})
	return out
}
