package talosnode_test

import (
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/homelab-migrate/migrate/lab/talosnode"
)

// A node of Talos 1.14 booted from its ISO installs a first config of
// 1.14's shape (the install in UnattendedInstallConfig) and comes back
// installed, serving mTLS.
func TestMaintenanceInstall114(t *testing.T) {
	contract, err := talosconfig.ParseContractFromVersion("v1.14.1")
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := secrets.NewBundle(secrets.NewClock(), contract)
	if err != nil {
		t.Fatal(err)
	}
	in, err := generate.NewInput("first", "https://127.0.0.1:6443", talosnode.KubernetesVersionOf("v1.14.1"),
		generate.WithVersionContract(contract), generate.WithSecretsBundle(bundle),
		generate.WithInstallDisk("/dev/sda"), generate.WithInstallImage("factory.talos.dev/metal-installer/abc123:v1.14.1"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := in.Config(machinetype.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}
	data, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		t.Fatal(err)
	}

	n := startNode(t, talosnode.Options{Dir: t.TempDir(), Version: "v1.14.1", Maintenance: true, Disks: labDisks, RebootDuration: 200 * time.Millisecond})
	c, ctx := insecure(t, n)
	if _, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: data, Mode: machine.ApplyConfigurationRequest_AUTO}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.Installed():
	case <-time.After(30 * time.Second):
		t.Fatalf("the node did not come back installed; install failures: %v", n.InstallFailures())
	}
	if image, disk := n.Install(); image != "factory.talos.dev/metal-installer/abc123:v1.14.1" || disk != "/dev/sda" {
		t.Fatalf("install: %q %q", image, disk)
	}
}
