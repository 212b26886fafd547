package talos_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/lab/talosnode"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/talos"
)

// selectorDisks are a VM's disks as Incus names them: the root device
// and a bulk disk, both QEMU HARDDISKs.
var selectorDisks = []talosnode.Disk{
	{Name: "/dev/sda", Size: "32GiB", Model: "QEMU HARDDISK", Serial: "incus_root", Transport: "scsi"},
	{Name: "/dev/sdb", Size: "150GiB", Model: "QEMU HARDDISK", Serial: "incus_bulk", Transport: "scsi"},
}

// startMaintenanceAt is startMaintenance of a node booted at a version.
func startMaintenanceAt(t *testing.T, version string, disks []talosnode.Disk) *maintLab {
	t.Helper()
	n, err := talosnode.New(talosnode.Options{Dir: t.TempDir(), Version: version, Maintenance: true, Disks: disks, RebootDuration: 200 * time.Millisecond, Hostname: "lab-node"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return newMaintLab(t, n, "https://127.0.0.1:6443")
}

// selectorProvider is the provider of l choosing the install disk by sel.
func selectorProvider(t *testing.T, l *maintLab, version, sel string) *talos.Provider {
	t.Helper()
	conf := l.config(false)
	conf["version"] = cty.StringVal(version)
	conf["install_disk_selector"] = cty.StringVal(sel)
	return l.provider(t, conf)
}

// installLine is the plan's install disk line.
func installLine(diff string) string {
	for l := range strings.SplitSeq(diff, "\n") {
		if strings.HasPrefix(l, "install disk:") {
			return l
		}
	}
	return ""
}

// On Talos 1.13 the selector is written as machine.install.diskSelector;
// the plan shows the disk it picks by what it is, no device name, and the
// node installs to that disk.
func TestInstallDiskSelectorOn113(t *testing.T) {
	t.Parallel()
	l := startMaintenanceAt(t, "v1.13.3", selectorDisks)
	p := selectorProvider(t, l, "v1.13.3", `disk.serial == "incus_root"`)
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml")})
	pr := plan(p, talos.MachineConfig, cfg)
	if err := pr.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan: %v", err)
	}
	line := installLine(pr.Diff)
	for _, want := range []string{"install disk: selected by `disk.serial == \"incus_root\"`", "written as its diskSelector {serial: incus_root}",
		`glob("incus_root", disk.serial)`, "node " + l.n.Addr() + ": the 34 GB scsi disk (QEMU HARDDISK, serial incus_root)"} {
		if !strings.Contains(line, want) {
			t.Errorf("the install disk line lacks %q:\n%s", want, line)
		}
	}
	if strings.Contains(line, "/dev/") {
		t.Errorf("the install disk line names a device:\n%s", line)
	}
	var log bytes.Buffer
	r := p.Apply(context.Background(), providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Planned: pr.Private, Log: &log})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\n%s", err, log.String())
	}
	if _, disk := l.n.Install(); disk != "/dev/sda" {
		t.Errorf("the node installed to %q, want the root disk /dev/sda", disk)
	}
}

// On Talos 1.14 the expression goes as it is into UnattendedInstallConfig,
// any CEL the disk environment takes.
func TestInstallDiskSelectorOn114(t *testing.T) {
	t.Parallel()
	l := startMaintenanceAt(t, "v1.14.1", selectorDisks)
	p := selectorProvider(t, l, "v1.14.1", `disk.transport == "scsi" && !disk.readonly && disk.size < 100u * GiB`)
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml")})
	pr := plan(p, talos.MachineConfig, cfg)
	if err := pr.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan: %v", err)
	}
	line := installLine(pr.Diff)
	if !strings.Contains(line, "(UnattendedInstallConfig's provisioning.diskSelector.match): node "+l.n.Addr()+": the 34 GB scsi disk (QEMU HARDDISK, serial incus_root)") || strings.Contains(line, "/dev/") {
		t.Errorf("the install disk line:\n%s", line)
	}
	var log bytes.Buffer
	r := p.Apply(context.Background(), providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Planned: pr.Private, Log: &log})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\n%s", err, log.String())
	}
	if _, disk := l.n.Install(); disk != "/dev/sda" {
		t.Errorf("the node installed to %q, want /dev/sda", disk)
	}
}

// A selector that picks no disk or two fails the plan with the disks the
// node reports; one 1.13 cannot write fails it saying what to do.
func TestInstallDiskSelectorMustPickOne(t *testing.T) {
	t.Parallel()
	l := startMaintenanceAt(t, "v1.13.3", selectorDisks)
	for _, c := range []struct {
		sel  string
		want []string
	}{
		{`disk.serial == "nope"`, []string{"Install Disk Selector Must Match One Disk", "matches no disk", "/dev/sda (34 GB, QEMU HARDDISK, serial incus_root)", "/dev/sdb (161 GB, QEMU HARDDISK, serial incus_bulk)"}},
		{`disk.model == "QEMU HARDDISK"`, []string{"matches 2 disks", "/dev/sda (34 GB", "/dev/sdb (161 GB"}},
		{`disk.size > 100u * GiB`, []string{"Cannot Render Install Disk", "Talos 1.13's machine.install.diskSelector can only test", "pin Talos 1.14"}},
	} {
		p := selectorProvider(t, l, "v1.13.3", c.sel)
		pr := plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/node.yaml")}))
		err := pr.Diagnostics.Err()
		if err == nil {
			t.Errorf("%s: the plan passed:\n%s", c.sel, pr.Diff)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: the error lacks %q: %v", c.sel, w, err)
			}
		}
	}
	if a := l.n.Applies(); len(a) != 0 {
		t.Errorf("plans applied: %+v", a)
	}
	// Both attributes at once are refused.
	conf := l.config(false)
	conf["install_disk"] = cty.StringVal("/dev/sda")
	conf["install_disk_selector"] = cty.StringVal(`disk.serial == "incus_root"`)
	r := talos.New().Configure(context.Background(), providers.ConfigureRequest{Name: "node", Config: l.providerConfig(conf), Dir: l.dir})
	if err := r.Diagnostics.Err(); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("install_disk with install_disk_selector: %v", err)
	}
}
