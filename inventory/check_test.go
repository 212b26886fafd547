package inventory_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/inventory"
)

// brief is the story's host as Read would see it: three old VMs, the
// Intel iGPU, the pools and the LAN bridge.
func brief() *inventory.Host {
	vm := func(name string, apps ...inventory.App) inventory.Instance {
		return inventory.Instance{Name: name, Type: "virtual-machine", Status: "Running", Agent: inventory.AgentRunning, RootPool: "local",
			Devices: map[string]map[string]string{"root": {"type": "disk", "pool": "local", "path": "/"}}, Apps: apps}
	}
	return &inventory.Host{CPUs: 8, Memory: 32 << 30, DefaultPool: "local",
		GPUs: []inventory.GPUCard{{PCIAddress: "0000:00:02.0", Driver: "i915", Vendor: "Intel Corporation", VendorID: "8086"}},
		Pools: []inventory.Pool{{Name: "local", Driver: "zfs", Total: 1 << 40},
			{Name: "tank", Driver: "zfs", Total: 4 << 40, Volumes: []inventory.Volume{{Pool: "tank", Name: "data", ContentType: "filesystem"}}}},
		Networks: []inventory.Network{{Name: "incusbr0", Type: "bridge", Managed: true, NAT: true}, {Name: "enp5s0", Type: "bridge"}},
		Instances: []inventory.Instance{
			vm("services", inventory.App{Name: "Jellyfin", Role: inventory.RoleServices}),
			vm("matrix", inventory.App{Name: "Synapse", Role: inventory.RoleMatrix, Detail: map[string]string{"server_name": "m.example.net"}}),
			vm("k3s", inventory.App{Name: "k3s", Role: inventory.RoleK3s}),
		}}
}

func judge(t *testing.T, h *inventory.Host) []inventory.Finding {
	t.Helper()
	site, guesses, err := inventory.Choose(tmpl(t), h, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return append(guesses, inventory.Check(h, site)...)
}

func has(fs []inventory.Finding, code, severity, subject, seen string) bool {
	for _, f := range fs {
		if f.Code == code && f.Severity == severity && f.Subject == subject && strings.Contains(f.Seen, seen) {
			return true
		}
	}
	return false
}

// TestCheck: each way a host can stop the move is a finding of its code
// and severity; the brief's host has only the story's.
func TestCheck(t *testing.T) {
	fs := judge(t, brief())
	for _, f := range fs {
		if f.Severity == inventory.Blocker {
			t.Errorf("the brief's host has a blocker: %+v", f)
		}
	}
	if !has(fs, inventory.CodeVMNoGPU, inventory.Warning, "instance services", "decoding ran on the CPU") {
		t.Errorf("no vm-no-gpu: %+v", fs)
	}

	for _, tc := range []struct {
		name                          string
		change                        func(h *inventory.Host)
		code, severity, subject, seen string
		steps                         string
	}{
		{"no agent", func(h *inventory.Host) { h.Instances[1].Agent = inventory.AgentAbsent },
			inventory.CodeNoAgent, inventory.Blocker, "instance matrix", "incus_exec.export_synapse", "incus_file.signing_key"},
		{"no agent on k3s", func(h *inventory.Host) { h.Instances[2].Agent = inventory.AgentAbsent },
			inventory.CodeNoAgent, inventory.Warning, "instance k3s", "its stop and snapshot need no agent", ""},
		{"stopped VM", func(h *inventory.Host) {
			h.Instances[2].Status, h.Instances[2].Agent = "Stopped", inventory.AgentUnknown
		},
			inventory.CodeAgentUnknown, inventory.Warning, "instance k3s", "is stopped", ""},
		{"gpu passed through", func(h *inventory.Host) {
			h.Instances[0].Devices["gpu0"] = map[string]string{"type": "gpu", "gputype": "physical", "pci": "0000:00:02.0"}
		}, inventory.CodeGPUInUse, inventory.Blocker, "gpu 0000:00:02.0", "until incus_instance_state.old_services (phase cleanup)", ""},
		{"no gpu", func(h *inventory.Host) { h.GPUs = nil },
			inventory.CodeNoHostGPU, inventory.Blocker, "host", "no GPU", "talos_read.rehearsal_igpu"},
		{"an AMD gpu", func(h *inventory.Host) {
			h.GPUs = []inventory.GPUCard{{PCIAddress: "0000:03:00.0", Driver: "amdgpu", Vendor: "AMD", VendorID: "1002"}}
		}, inventory.CodeGPUDriver, inventory.Warning, "gpu 0000:03:00.0", "not an Intel one", ""},
		{"no LAN bridge", func(h *inventory.Host) { h.Networks = h.Networks[:1] },
			inventory.CodeNoLANBridge, inventory.Blocker, "networks", "no bridge to the LAN", ""},
		{"a full pool", func(h *inventory.Host) { h.Pools[0].Used = h.Pools[0].Total - 100<<30 },
			inventory.CodePoolRoom, inventory.Blocker, "pool local", "has 100GiB free of 1TiB", ""},
		{"a dir pool's snapshots", func(h *inventory.Host) {
			h.Pools[0].Driver, h.Pools[0].Used = "dir", h.Pools[0].Total-240<<30
			h.Instances[0].RootUsage = 20 << 30
		}, inventory.CodePoolRoom, inventory.Blocker, "pool local", "the snapshot of services (a dir pool copies its 20GiB root)", ""},
		{"data volume used elsewhere", func(h *inventory.Host) {
			h.Pools[1].Volumes[0].UsedBy = []string{"backup"}
			h.Instances = append(h.Instances, inventory.Instance{Name: "backup", Type: "container", Status: "Running"})
		}, inventory.CodeVolumeAttached, inventory.Warning, "volume tank/data", "attached to backup", ""},
		{"no data volume", func(h *inventory.Host) { h.Pools[1].Volumes = nil },
			inventory.CodeNoDataVolume, inventory.Blocker, "data volume", "no custom filesystem volume", ""},
		{"pool unreadable", func(h *inventory.Host) {
			h.Pools[0].Total, h.Pools[0].Status, h.Pools[0].SpaceError = 0, "Unavailable", "500 Internal Server Error: Storage pool is unavailable"
		},
			inventory.CodePoolRoom, inventory.Warning, "pool local", "the space of pool local (status Unavailable) could not be read", ""},
		{"no k3s VM", func(h *inventory.Host) { h.Instances = h.Instances[:2] },
			inventory.CodeRoleMissing, inventory.Info, "role k3s", "no instance runs the k3s playground", ""},
		{"no matrix VM", func(h *inventory.Host) { h.Instances = slices.Delete(h.Instances, 1, 2) },
			inventory.CodeRoleMissing, inventory.Blocker, "role matrix", "no instance runs the Matrix homeserver", "incus_exec.export_synapse"},
		{"autostart", func(h *inventory.Host) { h.Instances[1].Autostart = true },
			inventory.CodeAutostart, inventory.Info, "instance matrix", "phase ingress-matrix", ""},
		{"found by name", func(h *inventory.Host) { h.Instances[2].Apps = nil },
			inventory.CodeGuess, inventory.Guess, "variable k3s_vm", "by its name only", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := brief()
			tc.change(h)
			fs := judge(t, h)
			if !has(fs, tc.code, tc.severity, tc.subject, tc.seen) {
				t.Fatalf("no %s %s finding about %s saying %q:\n%+v", tc.severity, tc.code, tc.subject, tc.seen, fs)
			}
			if tc.steps != "" {
				found := false
				for _, f := range fs {
					if f.Code == tc.code && strings.Contains(strings.Join(f.Steps, " "), tc.steps) {
						found = true
					}
				}
				if !found {
					t.Errorf("the %s finding does not mark step %s", tc.code, tc.steps)
				}
			}
		})
	}
}

func TestChooseRefusesAnEmptyHost(t *testing.T) {
	if _, _, err := inventory.Choose(tmpl(t), &inventory.Host{}, time.Now()); err != inventory.ErrNoInstances {
		t.Errorf("an empty host: %v", err)
	}
}

// TestChooseOmitsAnOptionalRole: a host without the k3s playground gets a
// runbook without its step; one without the homeserver does not (the
// move needs it: a blocker says so).
func TestChooseOmitsAnOptionalRole(t *testing.T) {
	h := brief()
	h.Instances = h.Instances[:2]
	site, _, err := inventory.Choose(tmpl(t), h, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(site.Omit) != 1 || !strings.Contains(site.Omit["incus_instance_state.old_k3s"], "k3s") {
		t.Errorf("omitted without k3s: %v", site.Omit)
	}
	h = brief()
	h.Instances = slices.Delete(h.Instances, 1, 2)
	if site, _, _ := inventory.Choose(tmpl(t), h, time.Now()); len(site.Omit) != 0 {
		t.Errorf("omitted without matrix: %v", site.Omit)
	}
}

// TestAppFindings: what the move does about each app's install is a
// finding; a release newer than the example's image raises the image in
// the site, never lowers it.
func TestAppFindings(t *testing.T) {
	t.Parallel()
	h := brief()
	h.Instances[0].Apps = []inventory.App{
		{Name: "Jellyfin", Role: inventory.RoleServices, Facts: &inventory.AppFacts{Kind: inventory.KindDebian, Package: "jellyfin-server", Version: "10.10.7+deb12",
			Database: &inventory.Database{Engine: inventory.EngineSQLite, Path: "/var/lib/jellyfin/data/jellyfin.db"}}},
		{Name: "Frigate", Role: inventory.RoleServices, Facts: &inventory.AppFacts{Kind: inventory.KindCompose, Package: "frigate", Version: "0.13.2",
			ConfigFiles: []string{"/opt/frigate/docker-compose.yml"}, HWAccel: "preset-vaapi"}},
	}
	h.Instances[1].Apps = []inventory.App{{Name: "Synapse", Role: inventory.RoleMatrix, Facts: &inventory.AppFacts{Kind: inventory.KindDebian,
		Database: &inventory.Database{Engine: inventory.EngineSQLite, Path: "/var/lib/matrix-synapse/homeserver.db"},
		Tools:    []string{"/opt/venvs/matrix-synapse/bin/python"}, Unread: []string{"version: no matrix-synapse-py3 package (dpkg-query)"}}}}
	site, guesses, err := inventory.Choose(tmpl(t), h, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a := site.Apps
	if a.Jellyfin != (inventory.AppSite{Version: "10.10.7+deb12", Image: "jellyfin/jellyfin:10.10.7", Raised: true}) {
		t.Errorf("Jellyfin's release: %+v", a.Jellyfin)
	}
	if a.Frigate != (inventory.AppSite{Version: "0.13.2", Image: "ghcr.io/blakeblackshear/frigate:0.14.1"}) {
		t.Errorf("Frigate, older than the example: %+v (a newer image reads its data)", a.Frigate)
	}
	if a.Synapse.Version != "" || a.Synapse.Image != "matrixdotorg/synapse:v1.120" || a.SynapseDatabase != "sqlite3" || a.FrigateInstall != "compose" || a.JellyfinHWAccel != "none" {
		t.Errorf("the apps' site: %+v", a)
	}
	fs := append(guesses, inventory.Check(h, site)...)
	for _, c := range []struct{ code, severity, subject, says string }{
		{inventory.CodeImageNewer, inventory.Info, "app Jellyfin", "jellyfin/jellyfin:10.10.7"},
		{inventory.CodeHWAccelOff, inventory.Info, "app Jellyfin", "/dev/dri/renderD128"},
		{inventory.CodeCompose, inventory.Info, "app Frigate", "docker compose -p frigate stop"},
		{inventory.CodeNoSQLite3, inventory.Info, "app Synapse", "Synapse's own Python"},
		{inventory.CodeAppUnread, inventory.Warning, "app Synapse", "set synapse_version"},
		{inventory.CodeAppInstall, inventory.Info, "app Jellyfin", "Jellyfin 10.10.7+deb12; Debian package jellyfin-server; database SQLite /var/lib/jellyfin/data/jellyfin.db"},
	} {
		if !slices.ContainsFunc(fs, func(f inventory.Finding) bool {
			return f.Code == c.code && f.Severity == c.severity && f.Subject == c.subject && strings.Contains(strings.ToLower(f.Seen+" "+f.Do), strings.ToLower(c.says))
		}) {
			t.Errorf("no %s %s finding on %s saying %q in %+v", c.severity, c.code, c.subject, c.says, fs)
		}
	}
	if len(findingsOf(fs, inventory.CodeHWAccelOff)) != 1 {
		t.Errorf("Frigate decodes with VA-API already: %+v", findingsOf(fs, inventory.CodeHWAccelOff))
	}

	// PostgreSQL: in the VM the move dumps it; elsewhere it cannot.
	for host, severity := range map[string]string{"localhost": inventory.Warning, "db.lan": inventory.Blocker} {
		h.Instances[1].Apps[0].Facts.Database = &inventory.Database{Engine: inventory.EnginePostgreSQL, Name: "synapse", Host: host}
		pg := findingsOf(judge(t, h), inventory.CodeSynapsePostgres)
		if len(pg) != 1 || pg[0].Severity != severity || !strings.Contains(pg[0].Seen+pg[0].Do, "pg_dump") {
			t.Errorf("Synapse on PostgreSQL at %s: %+v", host, pg)
		}
	}
}

// TestLANPhysicalNetwork: IncusOS after its direct-attach tutorial lists
// the LAN as a managed network of type physical (named as its interface,
// which it hides): init takes it as lan_network, with no false
// no-lan-bridge blocker.
func TestLANPhysicalNetwork(t *testing.T) {
	t.Parallel()
	h := brief()
	h.Networks = []inventory.Network{{Name: "incusbr0", Type: "bridge", Managed: true, NAT: true}, {Name: "enp5s0", Type: "physical", Managed: true, Parent: "enp5s0"}}
	site, guesses, err := inventory.Choose(tmpl(t), h, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if site.LANNetwork != "enp5s0" || site.LANBridge != "" {
		t.Errorf("the LAN: network %q, bridge %q", site.LANNetwork, site.LANBridge)
	}
	if nb := findingsOf(append(guesses, inventory.Check(h, site)...), inventory.CodeNoLANBridge); len(nb) != 0 {
		t.Errorf("a false blocker: %+v", nb)
	}
	// Without it, the host has no way onto the LAN: the blocker names both.
	h.Networks = h.Networks[:1]
	nb := findingsOf(judge(t, h), inventory.CodeNoLANBridge)
	if len(nb) != 1 || !strings.Contains(nb[0].Do, "lan_network") {
		t.Errorf("no LAN at all: %+v", nb)
	}
}
