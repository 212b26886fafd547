package examples

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v4"

	"github.com/homelab-migrate/migrate/lab/talosnode"
)

// firstInstallLab is the lab node booted from the ISO (maintenance mode)
// and the directory the example reads: the user's own secrets bundle and
// talosconfig, as talosctl gen secrets / gen config write them.
func firstInstallLab(t *testing.T) (*talosnode.Node, string) {
	t.Helper()
	lab := t.TempDir()
	n, err := talosnode.New(talosnode.Options{
		Dir: filepath.Join(lab, "node"), Maintenance: true, RebootDuration: 300 * time.Millisecond,
		Disks: []talosnode.Disk{
			{Name: "/dev/sda", Size: "32GiB", Model: "QEMU HARDDISK"},
			{Name: "/dev/sdb", Size: "150GiB", Model: "QEMU HARDDISK"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	contract, err := coreconfig.ParseContractFromVersion("v1.13.3")
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := secrets.NewBundle(secrets.NewClock(), contract)
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(bundle)
	if err != nil {
		t.Fatal(err)
	}
	in, err := generate.NewInput("lab", "https://127.0.0.1:6443", "", generate.WithSecretsBundle(bundle), generate.WithVersionContract(contract))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := in.Talosconfig()
	if err != nil {
		t.Fatal(err)
	}
	tb, err := tc.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string][]byte{"secrets.yaml": b, "talosconfig": tb, "address": []byte(n.Addr() + "\n")} {
		if err := os.WriteFile(filepath.Join(lab, name), text, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return n, lab
}

// TestFirstInstall: examples/first-install plans with the node's address
// deferred, then one run --all installs Talos on the node in maintenance
// mode, bootstraps and writes the kubeconfig; rollback walks back what can
// be undone.
func TestFirstInstall(t *testing.T) {
	t.Parallel()
	node, lab := firstInstallLab(t)
	dir := copyExample(t, "first-install")
	vars := []string{"--var", "lab=" + lab, "--state", filepath.Join(lab, "state")}

	out := run(t, dir, nil, append([]string{"plan"}, vars...)...)
	if !strings.Contains(out, "(known after exec.node)") {
		t.Errorf("plan does not show the deferred address:\n%s", out)
	}
	if len(node.Applies()) != 0 || !node.Maintenance() {
		t.Fatal("plan touched the node")
	}

	out = run(t, dir, nil, append([]string{"run", "--all", "--auto-approve"}, vars...)...)
	for _, want := range []string{"install: first config", "first apply allowed only to " + node.Addr(), "a first install cannot be undone"} {
		if !strings.Contains(out, want) {
			t.Errorf("run lacks %q:\n%s", want, out)
		}
	}
	image, disk := node.Install()
	if disk != "/dev/sda" || !strings.HasSuffix(image, ":v1.13.3") {
		t.Errorf("install = %q on %q, want the pinned image on /dev/sda (failures %v)", image, disk, node.InstallFailures())
	}
	if !node.Bootstrapped() {
		t.Error("the node was not bootstrapped")
	}
	kubeconfig := filepath.Join(lab, "rendered/kubeconfig")
	if fi, err := os.Stat(kubeconfig); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig: %v", err)
	}
	if out := run(t, dir, nil, append([]string{"plan"}, vars...)...); !strings.Contains(out, "0 to create, 0 to update") {
		t.Errorf("plan after the run is not empty:\n%s", out)
	}

	out = run(t, dir, nil, append([]string{"rollback", "--auto-approve"}, vars...)...)
	if !strings.Contains(out, "CANNOT be undone") || !strings.Contains(out, "! talos_machine_config.node") {
		t.Errorf("rollback does not say the first install stays:\n%s", out)
	}
	if _, err := os.Stat(kubeconfig); !os.IsNotExist(err) {
		t.Errorf("rollback left the kubeconfig: %v", err)
	}
}
