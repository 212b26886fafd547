package incushost_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/lab/incushost"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// TestResources: /1.0/resources and a pool's resources answer in the
// daemon's shape, with the hardware the host is given; the NAT bridge
// says it NATs.
func TestResources(t *testing.T) {
	hw := &incushost.Hardware{CPUs: 8, Memory: 32 << 30,
		GPUs:      []incushost.GPU{{PCIAddress: "0000:00:02.0", Driver: "i915", Vendor: "Intel Corporation", VendorID: "8086", Product: "UHD Graphics", Card: "card0", Render: "renderD128"}},
		Disks:     []incushost.HostDisk{{ID: "nvme0n1", Type: "nvme", Model: "SSD", Size: 1 << 40}},
		PoolSizes: map[string]int64{"default": 100 << 30}}
	_, c := lab(t, incushost.Options{Hardware: hw})
	ctx := ctxT(t)
	r, err := c.Resources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.CPU.Total != 8 || r.Memory.Total != 32<<30 || r.GPU.Total != 1 || r.Storage.Total != 1 {
		t.Errorf("resources: %+v", r)
	}
	g := r.GPU.Cards[0]
	if g.PCIAddress != "0000:00:02.0" || g.Driver != "i915" || g.VendorID != "8086" || g.DRM == nil || g.DRM.RenderName != "renderD128" {
		t.Errorf("the GPU: %+v", g)
	}
	if d := r.Storage.Disks[0]; d.ID != "nvme0n1" || d.Size != 1<<40 || d.Type != "nvme" {
		t.Errorf("the disk: %+v", d)
	}
	pr, err := c.StoragePoolResources(ctx, "default")
	if err != nil || pr.Space.Total != 100<<30 || pr.Free() <= 0 {
		t.Errorf("pool resources: %+v %v", pr, err)
	}
	// The daemon answers an unknown pool's resources with a 500 (its GET
	// is a 404): a client must not take it for "no such pool".
	var se *incusapi.StatusError
	if _, err := c.StoragePoolResources(ctx, "nope"); !errors.As(err, &se) || se.StatusCode != 500 || !strings.Contains(se.Message, "Storage pool not found") {
		t.Errorf("an unknown pool's resources: %v", err)
	}
	// used_by, as the daemon's: the default profile's root disk is on the
	// pool, and an instance's NIC on the bridge.
	if err := c.CreateInstance(ctx, incusapi.InstancesPost{Name: "u1", Type: "container", Source: incusapi.InstanceSource{Type: "image", Alias: image},
		InstancePut: incusapi.InstancePut{Devices: map[string]map[string]string{"eth0": {"type": "nic", "network": "labbr0"}}}}); err != nil {
		t.Fatal(err)
	}
	if p, err := c.StoragePool(ctx, "default"); err != nil || !slices.Equal(p.UsedBy, []string{"/1.0/instances/u1", "/1.0/profiles/default"}) {
		t.Errorf("the pool's used_by: %+v %v", p, err)
	}
	if n, err := c.Network(ctx, "labbr0"); err != nil || !slices.Equal(n.UsedBy, []string{"/1.0/instances/u1"}) {
		t.Errorf("the network's used_by: %+v %v", n, err)
	}
	nets, err := c.Networks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nets {
		if n.Managed && n.Config["ipv4.nat"] != "true" {
			t.Errorf("the managed bridge %s does not say it NATs: %v", n.Name, n.Config)
		}
	}

	// Without hardware given: no GPU, no disk; the machine's file system.
	_, bare := lab(t, incushost.Options{})
	r, err = bare.Resources(ctx)
	if err != nil || r.GPU.Total != 0 || len(r.GPU.Cards) != 0 || r.CPU.Total == 0 {
		t.Errorf("bare resources: %+v %v", r, err)
	}
	if pr, err := bare.StoragePoolResources(ctx, "default"); err != nil || pr.Space.Total == 0 {
		t.Errorf("bare pool resources: %+v %v", pr, err)
	}
}

// TestSeededAutostart: the services and matrix VMs start with the host,
// the k3s playground does not.
func TestSeededAutostart(t *testing.T) {
	_, c := lab(t, incushost.Options{Seed: true})
	for name, want := range map[string]string{"services": "true", "matrix": "true", "k3s": ""} {
		if got := inst(t, c, name).Config["boot.autostart"]; got != want {
			t.Errorf("%s: boot.autostart %q, want %q", name, got, want)
		}
	}
}

// TestAgentlessVM: a VM booted from an ISO runs no Incus agent, as a
// Talos node: its state says -1 processes, and its files and commands
// are refused in the daemon's words; an old VM (with its agent) is read.
func TestAgentlessVM(t *testing.T) {
	boot := func(ctx context.Context, spec incushost.VMSpec) (incushost.Guest, error) { return &fakeGuest{}, nil }
	_, c := lab(t, incushost.Options{BootVM: boot, Seed: true})
	ctx := ctxT(t)
	iso := filepath.Join(t.TempDir(), "talos.iso")
	if err := os.WriteFile(iso, []byte("iso"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := c.CreateInstance(ctx, incusapi.InstancesPost{Name: "talos", Type: "virtual-machine", Source: incusapi.InstanceSource{Type: "none"}, Start: true,
		InstancePut: incusapi.InstancePut{Devices: map[string]map[string]string{"install": {"type": "disk", "source": iso}}}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.InstanceState(ctx, "talos")
	if err != nil || st.Processes != -1 {
		t.Errorf("a booted VM's processes: %+v %v", st, err)
	}
	if _, _, _, err := c.GetFile(ctx, "talos", "/etc/hostname"); err == nil || !strings.Contains(err.Error(), "VM agent isn't currently running") {
		t.Errorf("the files of a VM without agent: %v", err)
	}
	if _, err := c.StatFile(ctx, "talos", "/etc"); err == nil || incusapi.IsNotFound(err) { // HEAD: the status, no body
		t.Errorf("a HEAD of a file of a VM without agent: %v", err)
	}
	if _, err := c.StartExec(ctx, "talos", incusapi.ExecPost{Command: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "VM agent isn't currently running") {
		t.Errorf("a command in a VM without agent: %v", err)
	}
	if st, err := c.InstanceState(ctx, "services"); err != nil || st.Processes < 1 {
		t.Errorf("an old VM's processes: %+v %v", st, err)
	}
	if _, err := c.StatFile(ctx, "services", "/etc/jellyfin"); err != nil {
		t.Errorf("an old VM's files: %v", err)
	}
}
