package examples

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/lab/home"
	"github.com/homelab-migrate/migrate/views"
)

// TestHomelabOnTalos114: examples/homelab with talos_version = v1.14.1
// and its 1.13 patches: the plan fails showing each patch rewritten into
// 1.14's documents as a diff; `migrate patches upgrade --write` writes
// them; then the rehearsal and platform run against the lab: the ISO of
// that release from the lab's factory, nodes of that release, configs
// rendered for it. A v1.13.3 pin against the installed v1.14.1 node is
// then refused by the skew guard.
func TestHomelabOnTalos114(t *testing.T) {
	t.Parallel()
	h, err := home.Start(t.Context(), home.Options{Dir: filepath.Join(t.TempDir(), "lab"), AddressBlock: 29}) // a block of its own
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	dir := copyExample(t, "homelab")
	originals := map[string][]byte{}
	for _, patch := range []string{"patches/rehearsal.yaml", "patches/node.yaml"} {
		path := filepath.Join(dir, patch)
		originals[path] = must(os.ReadFile(path))
	}
	migrateAt := func(version string, args ...string) (string, error) {
		cmd := exec.Command(migrate, append(args, "--runbook", dir, "--no-color")...)
		cmd.Env = append(append(os.Environ(), h.Env()...), "MIGRATE_AGE_IDENTITY="+filepath.Join(dir, "secrets/demo-identity.txt"), "MIGRATE_VAR_talos_version="+version)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	stale, err := migrateAt("v1.14.1", "plan", "--phase", "rehearsal")
	if err == nil {
		t.Fatalf("the 1.13 patches planned for v1.14.1:\n%s", stale)
	}
	for _, want := range []string{"Patch Written For An Older Talos", "patches/rehearsal.yaml (Talos v1.14.1)", "-  allowSchedulingOnControlPlanes: true", "+kind: KubeNodeConfig",
		"migrate patches upgrade --to v1.14.1 --write"} {
		if !strings.Contains(stale, want) {
			t.Errorf("the refused plan lacks %q:\n%s", want, stale)
		}
	}
	if out, err := migrateAt("v1.14.1", "patches", "upgrade", "--to", "v1.14.1", "--write"); err != nil || !strings.Contains(out, "Rewrote 2 patch(es) for Talos v1.14.1") {
		t.Fatalf("patches upgrade: %v\n%s", err, out)
	}
	plan, err := migrateAt("v1.14.1", "plan", "--phase", "rehearsal", "--phase", "platform")
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, plan)
	}
	for _, want := range []string{"rendered for Talos v1.14.1", "talos-v1.14.1-i915.iso", "node rehearsal as its machine config makes it: taints none"} {
		if !strings.Contains(plan, want) {
			t.Errorf("the plan lacks %q:\n%s", want, plan)
		}
	}
	for _, ph := range []string{"rehearsal", "platform"} {
		if out, err := migrateAt("v1.14.1", "run", "--phase", ph, "--auto-approve"); err != nil {
			t.Fatalf("run --phase %s: %v\n%s", ph, err, out)
		}
	}
	vm := h.VM("talos")
	if vm == nil {
		t.Fatal("no Talos VM after the platform phase")
	}
	if v := vm.Node().Version(); v != "v1.14.1" {
		t.Errorf("the node runs %s, want v1.14.1", v)
	}
	// The 1.13 patches again, and a 1.13 pin: the node is not of it.
	for path, b := range originals {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := migrateAt("v1.13.3", "plan", "--phase", "platform")
	if err == nil {
		t.Fatalf("a v1.13.3 pin planned against the v1.14.1 node:\n%s", out)
	}
	if text := strings.Join(strings.Fields(out), " "); !strings.Contains(text, "Talos Version Skew") || !strings.Contains(text, "v1.14.1") {
		t.Errorf("the refusal does not name the skew:\n%s", out)
	}
}

// TestInitOnTalos114: migrate init --talos-version v1.14.7 writes the
// example's patches in 1.14's documents (the talos program's rewrite),
// and the written runbook plans and runs its rehearsal against the lab
// with no hand edit, its nodes of that release. With the 1.15 beta, init
// writes the runbook as well (its patches in the same documents), whose
// plan is refused until migrate links a machinery of 1.15.
func TestInitOnTalos114(t *testing.T) {
	t.Parallel()
	h, err := home.Start(t.Context(), home.Options{Dir: filepath.Join(t.TempDir(), "lab"), AddressBlock: 47}) // a block of its own
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	key, _ := identity(t)
	env := append(h.Env(), "MIGRATE_AGE_IDENTITY="+key)

	var rep views.InitReport
	code, js, stderr := initRun(t, env, "--talos-version", "v1.14.7", "--json", filepath.Join(t.TempDir(), "home-114"))
	if code != 0 || json.Unmarshal([]byte(js), &rep) != nil {
		t.Fatalf("migrate init --talos-version v1.14.7: exit %d\n%s\n%s", code, js, stderr)
	}
	for _, name := range []string{"patches/node.yaml", "patches/rehearsal.yaml"} {
		b := string(must(os.ReadFile(filepath.Join(rep.Dir, name))))
		if strings.Contains(b, "allowSchedulingOnControlPlanes") || !strings.Contains(b, "kind: KubeNodeConfig") || !strings.Contains(b, "$patch: delete") {
			t.Errorf("%s is not in Talos 1.14's form:\n%s", name, b)
		}
	}
	if site := string(must(os.ReadFile(filepath.Join(rep.Dir, "site.auto.hcl")))); !strings.Contains(strings.Join(strings.Fields(site), " "), `talos_version = "v1.14.7"`) {
		t.Errorf("site.auto.hcl does not pin v1.14.7:\n%s", site)
	}
	plan := run(t, rep.Dir, env, "plan", "--phase", "rehearsal")
	for _, want := range []string{"rendered for Talos v1.14.7", "talos-v1.14.7-i915.iso"} {
		if !strings.Contains(plan, want) {
			t.Errorf("the plan lacks %q:\n%s", want, tail(plan, 4000))
		}
	}
	if err := h.Reserve(rep.Site.RehearsalMAC, h.RehearsalAddress()); err != nil {
		t.Fatal(err)
	}
	rehearsal := strings.Join(strings.Fields(run(t, rep.Dir, env, "run", "--phase", "rehearsal", "--auto-approve")), " ")
	if !strings.Contains(rehearsal, "Phase rehearsal complete") {
		t.Errorf("the rehearsal of the 1.14 runbook:\n%s", tail(rehearsal, 4000))
	}

	beta := filepath.Join(t.TempDir(), "home-115")
	if code, out, stderr := initRun(t, env, "--talos-version", "v1.15.0-beta.0", beta); code != 0 {
		t.Fatalf("migrate init --talos-version v1.15.0-beta.0: exit %d\n%s\n%s", code, out, stderr)
	}
	if b := string(must(os.ReadFile(filepath.Join(beta, "patches/node.yaml")))); !strings.Contains(b, "kind: KubeNodeConfig") {
		t.Errorf("the 1.15 runbook's node.yaml:\n%s", b)
	}
	cmd := exec.Command(migrate, "plan", "--phase", "rehearsal", "--runbook", beta, "--no-color")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if text := strings.Join(strings.Fields(string(out)), " "); err == nil || !strings.Contains(text, "newer than the machine-config library") {
		t.Errorf("the 1.15 runbook's plan (machinery v1.14 linked): %v\n%s", err, out)
	}
}
