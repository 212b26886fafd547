package talosvm_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/homelab-migrate/migrate/lab/factory"
	"github.com/homelab-migrate/migrate/lab/talosnode"
	"github.com/homelab-migrate/migrate/lab/talosvm"
)

// A VM booted from the nocloud ISO with a config drive installs from the
// drive's user-data: no maintenance mode, no ApplyConfiguration. The
// metal ISO with the same drive does not look at it.
func TestNocloudISOInstallsFromTheDrive(t *testing.T) {
	t.Parallel()

	iso := func(platform string) string {
		b, err := factory.EncodePlatformISO(platform, "v1.13.3", "amd64", factory.Schematic{})
		if err != nil {
			t.Fatal(err)
		}

		p := filepath.Join(t.TempDir(), platform+".iso")
		if err = os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}

		return p
	}

	addr := freeAddr(t)
	in, err := talosnode.UserInput("homelab", generate.WithInstallDisk("/dev/sda"), generate.WithInstallImage("factory.talos.dev/metal-installer/abc:v1.13.3"))
	if err != nil {
		t.Fatal(err)
	}

	in.ControlPlaneEndpoint = talosvm.Endpoint(addr)

	cfg, err := in.Config(machinetype.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}

	data, err := cfg.Bytes()
	if err != nil {
		t.Fatal(err)
	}

	vm, err := talosvm.Boot(context.Background(), talosvm.Spec{Name: "talos", Addr: addr, Dir: t.TempDir(), Disks: disks, ISO: iso("nocloud"),
		UserData: data, RebootDuration: 100 * time.Millisecond, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vm.Stop)

	select {
	case <-vm.Node().Installed():
	case <-time.After(time.Minute):
		t.Fatal("the nocloud VM did not install from its config drive")
	}

	if n := vm.Node(); n.Maintenance() || n.PlatformConfig() == "" || len(n.Applies()) != 0 {
		t.Errorf("maintenance %v, platform config %q, applies %v", n.Maintenance(), n.PlatformConfig(), n.Applies())
	}

	metal, err := talosvm.Boot(context.Background(), talosvm.Spec{Name: "metal", Addr: freeAddr(t), Dir: t.TempDir(), Disks: disks, ISO: iso("metal"),
		UserData: data, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(metal.Stop)

	if !metal.Node().Maintenance() || metal.Node().PlatformConfig() != "" {
		t.Error("the metal ISO took the config drive's user-data")
	}
}
