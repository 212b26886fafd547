package talos_test

import (
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/zclconf/go-cty/cty"
	"go.yaml.in/yaml/v4"

	"github.com/homelab-migrate/migrate/lab/talosnode"
	"github.com/homelab-migrate/migrate/providers/talos"
)

// maintLab is a lab node booted from the ISO (maintenance mode) and the
// user's own secrets bundle and talosconfig, as talosctl gen secrets and
// gen config write them.
type maintLab struct {
	*lab
	secrets, talosconfig string
}

var maintDisks = []talosnode.Disk{
	{Name: "/dev/sda", Size: "32GiB", Model: "QEMU HARDDISK", Transport: "scsi"},
	{Name: "/dev/sdb", Size: "150GiB", Model: "QEMU HARDDISK", Serial: "bulk", Transport: "scsi"},
}

func startMaintenance(t *testing.T, disks []talosnode.Disk) *maintLab {
	t.Helper()
	n, err := talosnode.New(talosnode.Options{Dir: t.TempDir(), Maintenance: true, Disks: disks, RebootDuration: 200 * time.Millisecond, Hostname: "lab-node"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	if !n.Maintenance() {
		t.Fatal("the lab node is not in maintenance mode")
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	l := &maintLab{lab: &lab{n: n, dir: t.TempDir(), id: id}}
	l.write(t, "identity.txt", id.String()+"\n")
	l.write(t, "patches/node.yaml", briefPatch)

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
	l.secrets = l.write(t, "secrets.yaml", string(b))
	in, err := generate.NewInput("lab", "https://127.0.0.1:6443", "", generate.WithSecretsBundle(bundle), generate.WithVersionContract(contract))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := in.Talosconfig()
	if err != nil {
		t.Fatal(err)
	}
	tc.Contexts[tc.Context].Endpoints = []string{n.Addr()}
	tb, err := tc.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	l.talosconfig = l.write(t, "talosconfig", string(tb))
	return l
}

// config is the provider block; the endpoint is named by the runbook
// unless fromTalosconfig.
func (l *maintLab) config(fromTalosconfig bool) map[string]cty.Value {
	m := map[string]cty.Value{
		"talosconfig": cty.StringVal(l.talosconfig),
		"secrets":     cty.StringVal(l.secrets),
		"endpoints":   strs(l.n.Addr()),
	}
	if fromTalosconfig {
		m["endpoints"] = cty.NilVal
	}
	return m
}

func TestPlanFirstInstallOfMaintenanceNode(t *testing.T) {
	t.Parallel()
	l := startMaintenance(t, maintDisks)
	p := l.provider(t, l.config(false))
	r := plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/node.yaml")}))
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan: %v", err)
	}
	image := "factory.talos.dev/metal-installer/dc8730aa8cc7bfa5ef7e2b3284248f2631135b2faf4ae11aa997a0c1987b0eee:v1.13.3"
	for _, want := range []string{
		"install: first config\n",
		"first apply allowed only to " + l.n.Addr() + " (the address the runbook names)",
		"install disk: /dev/sda\n",
		"installer image: " + image + " (schematic dc8730aa8cc7bfa5ef7e2b3284248f2631135b2faf4ae11aa997a0c1987b0eee, pinned version v1.13.3)",
		"HostnameConfig", "ExternalVolumeConfig data", "UserVolumeConfig bulk",
	} {
		if !strings.Contains(r.Diff, want) {
			t.Errorf("the plan lacks %q:\n%s", want, r.Diff)
		}
	}
	if !strings.Contains(r.Irreversible, "first install") {
		t.Errorf("Irreversible = %q, want the first install named", r.Irreversible)
	}
	if a := l.n.Applies(); len(a) != 0 {
		t.Errorf("plan sent configs to the node: %+v", a)
	}
	if !l.n.Maintenance() {
		t.Error("the node left maintenance mode at plan")
	}
}

func TestFirstInstallOnlyToTheAddressTheRunbookNames(t *testing.T) {
	t.Parallel()
	l := startMaintenance(t, maintDisks)
	p := l.provider(t, l.config(true)) // the address comes from the talosconfig
	r := plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/node.yaml")}))
	err := r.Diagnostics.Err()
	if err == nil || !strings.Contains(err.Error(), "First Install Not Allowed") || !strings.Contains(err.Error(), l.n.Addr()+" comes from the talosconfig") {
		t.Fatalf("Plan error = %v, want the first install refused to an address the runbook does not name", err)
	}
}

func TestInstalledNodeIsNotMaintenance(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	// an mTLS failure that is not maintenance mode (here the talosconfig
	// of another bundle) stays the error of today
	ml := startMaintenance(t, maintDisks)
	p := l.provider(t, map[string]cty.Value{"talosconfig": cty.StringVal(ml.talosconfig), "endpoints": strs(l.n.Addr())})
	r := plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/node.yaml")}))
	err := r.Diagnostics.Err()
	if err == nil || strings.Contains(r.Diff, "install: first config") || !strings.Contains(err.Error(), "did not answer its version") {
		t.Fatalf("Plan = %q, %v; want the version error of today", r.Diff, err)
	}
}
