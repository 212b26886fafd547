package incushost_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/homelab-migrate/migrate/lab/incushost"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// The config drive as the daemon has it: a VM's cloud-init:config disk
// carries its cloud-init.user-data (what a nocloud image reads); the
// daemon refuses the drive with a pool, on a container at start, and a
// #cloud-config that is no YAML.
func TestConfigDriveForVMsOnly(t *testing.T) {
	var (
		mu    sync.Mutex
		drive map[string]string
	)
	boot := func(_ context.Context, spec incushost.VMSpec) (incushost.Guest, error) {
		mu.Lock()
		defer mu.Unlock()
		drive = spec.ConfigDrive
		return &fakeGuest{}, nil
	}
	_, c := lab(t, incushost.Options{BootVM: boot})
	ctx := ctxT(t)
	iso := filepath.Join(t.TempDir(), "talos.iso")
	if err := os.WriteFile(iso, []byte("iso"), 0o644); err != nil {
		t.Fatal(err)
	}
	userData := "version: v1alpha1\nmachine:\n  type: controlplane\n"
	vm := func(name string, cfg map[string]string, cidata map[string]string) error {
		return c.CreateInstance(ctx, incusapi.InstancesPost{Name: name, Type: "virtual-machine", Source: incusapi.InstanceSource{Type: "none"},
			InstancePut: incusapi.InstancePut{Config: cfg, Devices: map[string]map[string]string{
				"install": {"type": "disk", "source": iso}, "cidata": cidata}}})
	}
	if err := vm("talos", map[string]string{"cloud-init.user-data": userData}, map[string]string{"type": "disk", "source": "cloud-init:config"}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetState(ctx, "talos", incusapi.InstanceStatePut{Action: "start"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := drive
	mu.Unlock()
	if got["user-data"] != userData || got["vendor-data"] != "#cloud-config\n{}" || !strings.HasPrefix(got["meta-data"], "instance-id: talos\nlocal-hostname: talos\n") {
		t.Errorf("the config drive: %q", got)
	}

	if err := vm("pooled", nil, map[string]string{"type": "disk", "source": "cloud-init:config", "pool": "default"}); err == nil || !strings.Contains(err.Error(), `Disk entry with source "cloud-init:config" cannot have a "pool" property set`) {
		t.Errorf("a config drive with a pool: %v", err)
	}
	if err := vm("badyaml", map[string]string{"cloud-init.user-data": "#cloud-config\nusers: [a"}, map[string]string{"type": "disk", "source": "cloud-init:config"}); err == nil || !strings.Contains(err.Error(), "Failed creating instance record: yaml: ") {
		t.Errorf("a #cloud-config that is no YAML: %v", err)
	}
	err := c.CreateInstance(ctx, incusapi.InstancesPost{Name: "ct", Type: "container", Source: incusapi.InstanceSource{Type: "image", Alias: image},
		InstancePut: incusapi.InstancePut{Devices: map[string]map[string]string{"cidata": {"type": "disk", "source": "cloud-init:config"}}}})
	if err != nil {
		t.Fatalf("a container with a config drive is created, as by the daemon: %v", err)
	}
	if err := c.SetState(ctx, "ct", incusapi.InstanceStatePut{Action: "start"}); err == nil || !strings.Contains(err.Error(), "disks with source=cloud-init:config are only supported by virtual machines") {
		t.Errorf("starting a container with a config drive: %v", err)
	}
}
