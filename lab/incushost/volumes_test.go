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

// TestPoolsAreTheOptions: the pools listed and checked are Options.Pools,
// the first the default profile's root disk pool.
func TestPoolsAreTheOptions(t *testing.T) {
	dir := t.TempDir()
	_, c := lab(t, incushost.Options{Dir: dir, Pools: []string{"local", "data"}})
	pools, err := c.StoragePools(ctxT(t))
	if err != nil || strings.Join(pools, ",") != "data,local" {
		t.Fatalf("pools: %v %v", pools, err)
	}
	if _, err := c.StoragePool(ctxT(t), "default"); !incusapi.IsNotFound(err) {
		t.Fatalf("pool default: %v", err)
	}
	if err := c.CreateStorageVolume(ctxT(t), "data", incusapi.StorageVolumesPost{Name: "photos"}); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateStorageVolume(ctxT(t), "default", incusapi.StorageVolumesPost{Name: "x"}); err == nil || !strings.Contains(err.Error(), "Storage pool not found") {
		t.Fatalf("a volume in a pool the lab lacks: %v", err)
	}
	launch(t, c, "box", false)
	i, _, err := c.Instance(ctxT(t), "box")
	if err != nil || i.ExpandedDevices["root"]["pool"] != "local" {
		t.Fatalf("root disk: %v %v", i, err)
	}
}

// TestVolumeHotplug: a filesystem volume is a directory that a disk
// device mounts; added to a running container it is mounted at once,
// removed at once; in use it cannot be deleted; deleted, its files go.
func TestVolumeHotplug(t *testing.T) {
	dir := t.TempDir()
	_, c := lab(t, incushost.Options{Dir: dir})
	if err := c.CreateStorageVolume(ctxT(t), "default", incusapi.StorageVolumesPost{Name: "photos"}); err != nil {
		t.Fatal(err)
	}
	files := filepath.Join(dir, "storage", "default", "custom", "photos")
	if st, err := os.Stat(files); err != nil || !st.IsDir() {
		t.Fatalf("the volume's directory: %v", err)
	}
	launch(t, c, "box", true)
	setDevice := func(d map[string]string) error {
		i, etag, err := c.Instance(ctxT(t), "box")
		if err != nil {
			t.Fatal(err)
		}
		put := i.Put()
		if d == nil {
			delete(put.Devices, "data")
		} else {
			put.Devices["data"] = d
		}
		return c.UpdateInstance(ctxT(t), "box", put, etag)
	}
	if err := setDevice(map[string]string{"type": "disk", "pool": "default", "source": "photos", "path": "/mnt/data"}); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := run(t, c, "box", "sh", "-c", "echo hi > /mnt/data/f"); code != 0 {
		t.Fatalf("writing through the hot-plugged disk: %d %s", code, stderr)
	}
	if b, err := os.ReadFile(filepath.Join(files, "f")); err != nil || string(b) != "hi\n" {
		t.Fatalf("the file in the volume: %q %v", b, err)
	}
	if err := c.DeleteStorageVolume(ctxT(t), "default", "photos"); err == nil || !strings.HasSuffix(err.Error(), ": The storage volume is still in use") {
		t.Fatalf("deleting a volume in use: %v", err)
	}
	if err := setDevice(nil); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := run(t, c, "box", "sh", "-c", "ls /mnt/data/f 2>&1"); code == 0 {
		t.Fatalf("the detached disk is still mounted: %s", out)
	}
	// A missing source is refused at once, the container as it was.
	if err := setDevice(map[string]string{"type": "disk", "source": filepath.Join(dir, "nope"), "path": "/mnt/nope"}); err == nil || !strings.Contains(err.Error(), "Missing source path") {
		t.Fatalf("hot-plugging a missing source: %v", err)
	}
	if i, _, _ := c.Instance(ctxT(t), "box"); i.Devices["data"] != nil {
		t.Fatalf("the refused hotplug was kept: %v", i.Devices)
	}
	if err := c.DeleteStorageVolume(ctxT(t), "default", "photos"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(files); !os.IsNotExist(err) {
		t.Fatalf("the deleted volume's files stayed: %v", err)
	}
}

// TestBootedVMSharesAFilesystemVolume: a booted VM gets a filesystem
// volume's directory as its shared directory; changing its shared disks
// while the guest runs is refused, saying what to do.
func TestBootedVMSharesAFilesystemVolume(t *testing.T) {
	var (
		mu    sync.Mutex
		specs []incushost.VMSpec
	)
	boot := func(_ context.Context, spec incushost.VMSpec) (incushost.Guest, error) {
		mu.Lock()
		defer mu.Unlock()
		specs = append(specs, spec)
		return &fakeGuest{}, nil
	}
	dir := t.TempDir()
	_, c := lab(t, incushost.Options{Dir: dir, BootVM: boot, Pools: []string{"local", "data"}})
	ctx := ctxT(t)
	if err := c.ImportStorageVolume(ctx, "local", "iso", "iso", strings.NewReader("an ISO image")); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateStorageVolume(ctx, "data", incusapi.StorageVolumesPost{Name: "photos"}); err != nil {
		t.Fatal(err)
	}
	err := c.CreateInstance(ctx, incusapi.InstancesPost{Name: "vm", Type: "virtual-machine", Source: incusapi.InstanceSource{Type: "none"}, Start: true,
		InstancePut: incusapi.InstancePut{Devices: map[string]map[string]string{
			"iso":    {"type": "disk", "pool": "local", "source": "iso", "boot.priority": "10"},
			"photos": {"type": "disk", "pool": "data", "source": "photos", "path": "/var/mnt/photos"},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(specs) != 1 || specs[0].DataShare != filepath.Join(dir, "storage", "data", "custom", "photos") {
		t.Fatalf("the VM's specs: %+v", specs)
	}
	mu.Unlock()
	i, etag, err := c.Instance(ctx, "vm")
	if err != nil {
		t.Fatal(err)
	}
	put := i.Put()
	delete(put.Devices, "photos")
	if err := c.UpdateInstance(ctx, "vm", put, etag); err == nil || !strings.Contains(err.Error(), "stop the instance") {
		t.Fatalf("unplugging a shared disk from a booted VM: %v", err)
	}
}
