package examples

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"go.yaml.in/yaml/v4"

	"github.com/homelab-migrate/migrate/lab/talosnode"
)

// firstInstallLab is the lab node booted from the ISO (maintenance mode)
// and the directory the example reads: the user's own secrets bundle and
// talosconfig, as talosctl gen secrets / gen config write them.
func firstInstallLab(t *testing.T, reboot time.Duration) (*talosnode.Node, string) {
	t.Helper()
	lab := t.TempDir()
	n, err := talosnode.New(talosnode.Options{
		Dir: filepath.Join(lab, "node"), Maintenance: true, RebootDuration: reboot,
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
	in, err := talosnode.UserInput("lab")
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(in.Options.SecretsBundle)
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
	// node/ready is what talos-lab writes once it serves: its address.
	for name, text := range map[string][]byte{"secrets.yaml": b, "talosconfig": tb, "node/ready": []byte(n.Addr() + "\n")} {
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
	dir := copyExample(t, "first-install")
	// Before anything exists (no node, no secrets): the plan still exits 0.
	nothing := filepath.Join(t.TempDir(), "nothing")
	out := run(t, dir, nil, "plan", "--var", "lab="+nothing, "--state", filepath.Join(nothing, "state"))
	if !strings.Contains(out, "(known after exec.node)") {
		t.Errorf("plan before anything exists does not show the deferred address:\n%s", out)
	}

	node, lab := firstInstallLab(t, 300*time.Millisecond)
	vars := []string{"--var", "lab=" + lab, "--state", filepath.Join(lab, "state")}

	out = run(t, dir, nil, append([]string{"plan"}, vars...)...)
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

// installs counts the configs the node took for real (not dry runs, not
// refused).
func installs(n *talosnode.Node) int {
	c := 0
	for _, a := range n.Applies() {
		if !a.DryRun && a.Err == "" {
			c++
		}
	}
	return c
}

// TestFirstInstallKilledDuringTheRebootWait: migrate is SIGKILLed while
// the node installs and reboots; the next run finishes the phase without
// sending the config a second time.
func TestFirstInstallKilledDuringTheRebootWait(t *testing.T) {
	t.Parallel()
	node, lab := firstInstallLab(t, 4*time.Second)
	dir := copyExample(t, "first-install")
	vars := []string{"--var", "lab=" + lab, "--state", filepath.Join(lab, "state")}

	cmd := exec.Command(migrate, append(append([]string{"run", "--all", "--auto-approve"}, vars...), "--runbook", dir, "--no-color")...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(2 * time.Minute)
	for installs(node) == 0 {
		select {
		case err := <-exited:
			t.Fatalf("migrate ended before the node took its config: %v\n%s", err, out.String())
		case <-deadline:
			cmd.Process.Kill() //nolint:errcheck
			t.Fatalf("the node took no config in 2m:\n%s", out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	select {
	case <-node.Installed():
		t.Fatal("the node was back before migrate was killed: the kill did not land in the reboot wait")
	default:
	}
	select {
	case <-node.Installed():
	case <-time.After(time.Minute):
		t.Fatalf("the node did not come back installed (failures %v)", node.InstallFailures())
	}

	// With an age identity, an installed node's config would get an
	// revert data: the resumed run must still record the first install as one.
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lab, "age.key"), []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"MIGRATE_AGE_IDENTITY=" + filepath.Join(lab, "age.key")}
	again := run(t, dir, env, append([]string{"run", "--all", "--auto-approve"}, vars...)...)
	if !strings.Contains(again, "talos_machine_config.node: done before the last run stopped") {
		t.Errorf("the resumed run did not see the install as done:\n%s", again)
	}
	if n := installs(node); n != 1 {
		t.Errorf("the node took %d configs, want the one install:\n%s", n, again)
	}
	if strings.Contains(again, "sending the first config") {
		t.Errorf("the resumed run sent the first config again:\n%s", again)
	}
	if !node.Bootstrapped() {
		t.Error("the resumed run did not bootstrap")
	}
	if _, err := os.Stat(filepath.Join(lab, "rendered/kubeconfig")); err != nil {
		t.Errorf("the resumed run wrote no kubeconfig: %v", err)
	}
	rb := run(t, dir, env, append([]string{"rollback", "--auto-approve"}, vars...)...)
	if !strings.Contains(rb, "! talos_machine_config.node") || installs(node) != 1 {
		t.Errorf("rollback after the resumed run did not leave the first install as it is (%d configs taken):\n%s", installs(node), rb)
	}
}
