package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `migrate patches upgrade` on the homelab's 1.13 patches: without
// --write a diff and nothing written; with --write each patch is
// rewritten, its old text kept as FILE.orig; a second --write refuses to
// replace the .orig files (writing nothing) unless --force.
func TestPatchesUpgradeWritesAndNeverOverwritesSilently(t *testing.T) {
	t.Parallel()
	made := madeMigrate(t) // with the talos program, which rewrites
	run := func(t *testing.T, dir string, code int, args ...string) result {
		t.Helper()
		r := migrateWith(t, made.migrate, dir, nil, args...)
		expect(t, r, code, args...)
		return r
	}
	dir := t.TempDir()
	var old = map[string][]byte{}
	for _, name := range []string{"node.yaml", "rehearsal.yaml"} {
		b, err := os.ReadFile(filepath.Join("../../examples/homelab/patches", name))
		if err != nil {
			t.Fatal(err)
		}
		old[name] = b
		if err := os.MkdirAll(filepath.Join(dir, "patches"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "patches", name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return string(b)
	}

	r := run(t, dir, 0, "patches", "upgrade", "--to", "v1.14.7")
	for _, want := range []string{"patches/node.yaml: cluster.allowSchedulingOnControlPlanes (line 37) -> KubeNodeConfig", "+kind: KubeNodeConfig", "-  allowSchedulingOnControlPlanes: true",
		"2 patch(es) to rewrite for Talos v1.14.7: nothing written"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the dry run lacks %q:\n%s", want, r)
		}
	}
	if read("patches/node.yaml") != string(old["node.yaml"]) {
		t.Fatal("the dry run wrote the patch")
	}

	r = run(t, dir, 0, "patches", "upgrade", "--to", "v1.14.7", "--write")
	if !strings.Contains(r.stdout, "Rewrote 2 patch(es) for Talos v1.14.7") {
		t.Errorf("the write says:\n%s", r)
	}
	node := read("patches/node.yaml")
	if !strings.Contains(node, "kind: KubeNodeConfig") || strings.Contains(node, "allowSchedulingOnControlPlanes") {
		t.Errorf("node.yaml rewritten:\n%s", node)
	}
	if read("patches/node.yaml.orig") != string(old["node.yaml"]) || read("patches/rehearsal.yaml.orig") != string(old["rehearsal.yaml"]) {
		t.Error("the old patches are not kept as .orig")
	}
	if fi, err := os.Stat(filepath.Join(dir, "patches/node.yaml")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("node.yaml's mode: %v %v", fi.Mode(), err)
	}
	r = run(t, dir, 0, "patches", "upgrade", "--to", "v1.14.7")
	if !strings.Contains(r.stdout, "Nothing to rewrite for Talos v1.14.7") {
		t.Errorf("the rewritten patches are rewritten again:\n%s", r)
	}

	// Back to the old text: a rewrite would replace the .orig copies.
	if err := os.WriteFile(filepath.Join(dir, "patches/node.yaml"), old["node.yaml"], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "patches/node.yaml.orig"), []byte("# mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = run(t, dir, 1, "patches", "upgrade", "--to", "v1.14.7", "--write")
	if !strings.Contains(r.stderr, "node.yaml.orig exists") || !strings.Contains(r.stderr, "--force") {
		t.Errorf("the refusal says:\n%s", r)
	}
	if read("patches/node.yaml.orig") != "# mine\n" || read("patches/node.yaml") != string(old["node.yaml"]) {
		t.Error("the refused write changed a file")
	}
	run(t, dir, 0, "patches", "upgrade", "--to", "v1.14.7", "--write", "--force", "patches/node.yaml")
	if read("patches/node.yaml.orig") != string(old["node.yaml"]) {
		t.Error("--force did not keep the old patch")
	}
	r = run(t, dir, 1, "patches", "upgrade", "--to", "latest")
	if !strings.Contains(r.stderr, "not a Talos version") {
		t.Errorf("--to latest:\n%s", r)
	}
}
