package examples

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/lab/home"
)

// kubeNodeConfig114 is how a Talos 1.14 patch lets pods schedule on a
// control plane: 1.14 writes the taint into its KubeNodeConfig document,
// and cluster.allowSchedulingOnControlPlanes conflicts with it.
const kubeNodeConfig114 = `apiVersion: v1alpha1
kind: KubeNodeConfig
taints:
  node-role.kubernetes.io/control-plane:
    $patch: delete
`

// TestHomelabOnTalos114: examples/homelab with talos_version = v1.14.1
// (its patches in 1.14's form) runs its rehearsal and platform against the
// lab: the ISO of that release from the lab's factory, nodes of that
// release, configs rendered for it. A v1.13.3 pin against the installed
// v1.14.1 node is then refused by the skew guard.
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
		b := string(originals[path])
		const old = "cluster:\n  allowSchedulingOnControlPlanes: true\n"
		if !strings.Contains(b, old) {
			t.Fatalf("%s does not end with the 1.13 scheduling patch", patch)
		}
		if err := os.WriteFile(path, []byte(strings.Replace(b, old, "---\n"+kubeNodeConfig114, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	migrateAt := func(version string, args ...string) (string, error) {
		cmd := exec.Command(migrate, append(args, "--runbook", dir, "--no-color")...)
		cmd.Env = append(append(os.Environ(), h.Env()...), "MIGRATE_AGE_IDENTITY="+filepath.Join(dir, "secrets/demo-identity.txt"), "MIGRATE_VAR_talos_version="+version)
		out, err := cmd.CombinedOutput()
		return string(out), err
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
