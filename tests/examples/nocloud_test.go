package examples

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/lab/home"
)

// TestHomelabNodeInstallsAfterItsVMFailed: the platform phase gives the
// node's first config as user_data, then its VM step fails (the host
// has no such LAN bridge). The state keeps user_data redacted, so the same
// command, run again, reads the config step back while no node answers
// yet, gives the VM its config drive, and the node installs from it:
// nothing is sent over the LAN, and the instance no longer holds the
// config at the end.
func TestHomelabNodeInstallsAfterItsVMFailed(t *testing.T) {
	t.Parallel()
	h, err := home.Start(t.Context(), home.Options{Dir: filepath.Join(t.TempDir(), "lab"), AddressBlock: 26}) // a block of its own
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	dir := copyExample(t, "homelab")
	migrateLab := func(args ...string) (string, error) {
		cmd := exec.Command(migrate, append(args, "--runbook", dir, "--no-color")...)
		cmd.Env = append(append(os.Environ(), h.Env()...), "MIGRATE_AGE_IDENTITY="+filepath.Join(dir, "secrets/demo-identity.txt"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := migrateLab("run", "--phase", "rehearsal", "--auto-approve"); err != nil {
		t.Fatalf("the rehearsal: %v\n%s", err, out)
	}
	out, err := migrateLab("run", "--phase", "platform", "--auto-approve", "--var", "lan_bridge=enp9s9")
	if err == nil || !strings.Contains(out, "group.node.talos_machine_config.config: done") || !strings.Contains(out, "enp9s9") {
		t.Fatalf("the platform phase with a memory the host refuses: %v\n%s", err, out)
	}
	if h.VM("talos") != nil {
		t.Fatal("the refused VM was made")
	}
	out, err = migrateLab("run", "--phase", "platform", "--auto-approve")
	if err != nil {
		t.Fatalf("the platform phase again: %v\n%s", err, out)
	}
	vm := h.VM("talos")
	if vm == nil {
		t.Fatalf("no Talos VM after the platform phase:\n%s", out)
	}
	if n := vm.Node(); n.PlatformConfig() == "" || len(n.Applies()) != 0 {
		t.Errorf("the node did not install from its config drive alone: platform config %q, configs over the LAN %d", n.PlatformConfig(), len(n.Applies()))
	}
	if strings.Contains(out, "group.node.talos_machine_config.config: done") {
		t.Errorf("the second run gave the config again:\n%s", out)
	}
}
