package examples

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/lab/home"
	"github.com/homelab-migrate/migrate/lab/talosnode"
)

// TestStrangerAtTheNodeAddressGetsNothing: the homelab's node installs
// from its config drive (first_install = "nocloud"), so no machine on
// the LAN is ever sent the first config. When the router lost the node's
// reservation and another machine, in maintenance mode as a Talos node
// waiting for its config, answers at node_address, the platform phase
// refuses before anything runs: that machine cannot prove who it is. The
// refusal says so and what to check; the machine got nothing and is
// still in maintenance mode, and no VM was made (so no instance holds the
// config either).
func TestStrangerAtTheNodeAddressGetsNothing(t *testing.T) {
	t.Parallel()
	h, err := home.Start(t.Context(), home.Options{Dir: filepath.Join(t.TempDir(), "lab"), AddressBlock: 24}) // a block no other test takes (torture: 23)
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

	if err := h.Reserve(home.NodeMAC, ""); err != nil {
		t.Fatal(err)
	}
	stranger, err := talosnode.New(talosnode.Options{Dir: t.TempDir(), Maintenance: true, Hostname: "neighbours-pc",
		NICs: []talosnode.NIC{{Name: "eth0", MAC: "10:66:6a:99:99:99"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := stranger.Start(net.JoinHostPort(h.NodeAddress(), "50000")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stranger.Stop)

	out, err := migrateLab("run", "--phase", "platform", "--auto-approve")
	if err == nil {
		t.Fatalf("the platform phase ran with another machine at the node's address:\n%s", out)
	}
	text := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"Node In Maintenance Mode", `installs through the Incus host's API (first_install = "nocloud")`,
		"answers in maintenance mode", "Nothing is sent", "check the router's leases"} {
		if !strings.Contains(text, want) {
			t.Errorf("the refusal lacks %q:\n%s", want, out)
		}
	}
	if a := stranger.Applies(); len(a) != 0 || !stranger.Maintenance() {
		t.Errorf("the other machine got %d configs (maintenance mode: %v)", len(a), stranger.Maintenance())
	}
	if h.VM("talos") != nil {
		t.Error("the refused plan made the platform's VM")
	}
}
