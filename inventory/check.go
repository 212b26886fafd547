package inventory

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// The template's steps of a role: those that reach inside its VM, the
// device of the data volume it gets for the export, the step that stops
// it (roles services, matrix, k3s: parts inside, data, stop).
func (t *Template) inside(role string) []string {
	if !t.Has(role, "inside") {
		return nil
	}
	return t.Steps(role, "inside")
}

func (t *Template) deviceStep(role string) string {
	if !t.Has(role, "data") {
		return ""
	}
	return t.Step(role, "data")
}

func (t *Template) stopStep(role string) string {
	if role == "" {
		return ""
	}
	return t.Step(role, "stop")
}

// Check judges the host as the source of the move the site describes.
func Check(h *Host, s Site) []Finding {
	t := s.Template
	vn := t.Name
	var fs []Finding
	add := func(code, severity, subject, seen, do string, steps ...string) {
		fs = append(fs, Finding{Code: code, Severity: severity, Subject: subject, Seen: seen, Do: do, Steps: steps})
	}
	inMove := map[string]string{} // instance -> role
	for _, role := range Roles {
		name := s.RoleVM(role)
		if s.Omits(role) {
			add(CodeRoleMissing, Info, "role "+role, missingRole(role),
				fmt.Sprintf("Nothing, if the host has none: the written main.hcl leaves out %s (commented out). If it has one, set %s in site.auto.hcl and uncomment the step.", strings.Join(t.roleSteps(role), ", "), vn(RoleVar(role))))
			continue
		}
		if name == "" {
			add(CodeRoleMissing, Blocker, "role "+role, missingRole(role),
				fmt.Sprintf("Set %s in site.auto.hcl to the old VM of %s; if there is none, delete the steps of main.hcl that name var.%s (marked TODO).", vn(RoleVar(role)), roleWhat(role), vn(RoleVar(role))),
				t.roleSteps(role)...)
			continue
		}
		inMove[name] = role
	}

	// The GPU: the story's best discovery was that the old VM had none.
	for _, i := range h.Instances {
		var video []string
		for _, a := range i.Apps {
			if a.Name == "Jellyfin" || a.Name == "Frigate" {
				v := a.Name
				if a.HWAccel != "" {
					v += " is set for hardware decoding: " + a.HWAccel
				}
				video = append(video, v)
			}
		}
		if len(video) == 0 && inMove[i.Name] != RoleServices {
			continue
		}
		if len(i.GPUDevices()) == 0 {
			seen := i.Name + " has no gpu device: its video decoding ran on the CPU"
			if i.VM() {
				seen = i.Name + " has no gpu device, only QEMU's emulated display: its video decoding ran on the CPU"
			}
			if len(video) > 0 {
				seen += " (" + strings.Join(video, "; ") + ", but no GPU is there to do it)"
			}
			add(CodeVMNoGPU, Warning, "instance "+i.Name, seen,
				"Nothing to carry over: the Talos VM gets the iGPU ("+vn(VarIGPUPCI)+") and the rehearsal proves the i915 driver sees it ("+t.Step("rehearsal", "igpu_check")+"). Expect far less CPU load once Jellyfin and Frigate run on the node.")
		}
	}
	if len(h.GPUs) == 0 {
		add(CodeNoHostGPU, Blocker, "host", "the host has no GPU (/1.0/resources lists none)",
			"The runbook passes "+vn(VarIGPUPCI)+" to the rehearsal and Talos VMs: delete their igpu devices and the check of the GPU in "+t.FilesOf(t.Steps("host", "gpu"))+" (marked TODO in main.hcl: "+strings.Join(t.Steps("host", "gpu"), ", ")+"), and accept decoding on the CPU.",
			t.Steps("host", "gpu")...)
	}
	for _, g := range h.GPUs {
		if g.PCIAddress != s.IGPUPCI {
			continue
		}
		subject := "gpu " + g.PCIAddress
		if !intel(&g) {
			add(CodeGPUDriver, Warning, subject, fmt.Sprintf("the GPU is %s %s (driver %q), not an Intel one", g.Vendor, g.Product, g.Driver),
				"The talos providers' schematic carries siderolabs/i915 (Intel): put the extension of this GPU in their extensions instead (siderolabs/amdgpu, or the NVIDIA ones), and change the rehearsal's check of it.")
		}
		if g.Driver == "" {
			add(CodeGPUDriver, Warning, subject, "no kernel driver is bound to the GPU on the host",
				"Check that the host sees it (IOMMU on in the firmware); Incus binds it to vfio-pci itself when the Talos VM starts.")
		}
		for _, i := range h.Instances {
			for _, dn := range i.GPUDevices() {
				d := i.Devices[dn]
				if d["pci"] != "" && d["pci"] != g.PCIAddress || !i.VM() {
					continue // another GPU, or a container's (shared) use
				}
				when := "it is not part of the move: it keeps running"
				if st := t.stopStep(inMove[i.Name]); st != "" {
					when = "it keeps running until " + st + " (phase " + t.PhaseOf(st) + ")"
				}
				sev := Blocker
				if !i.Running() {
					sev, when = Warning, "it is stopped now; were it started, the Talos VM could not start"
				}
				add(CodeGPUInUse, sev, subject, fmt.Sprintf("VM %s has the GPU passed through (device %s); a VM's passthrough is exclusive and %s", i.Name, dn, when),
					fmt.Sprintf("Remove the device from %s before the platform phase (incus config device remove %s %s); its video decoding moves to the CPU until the apps move.", i.Name, i.Name, dn))
			}
		}
	}

	// The agent: exec and file steps go through it.
	for _, i := range h.Instances {
		role, ok := inMove[i.Name]
		if !ok || !i.VM() {
			continue
		}
		switch i.Agent {
		case AgentAbsent:
			sev, steps := Warning, "its stop and snapshot need no agent"
			inside := t.inside(role)
			if len(inside) > 0 {
				sev, steps = Blocker, "the runbook's "+strings.Join(inside, ", ")+" cannot reach it"
			}
			seen := i.Name + " runs without the Incus agent (the daemon sees no processes): " + steps
			if i.FilesError != "" {
				seen += "; the files API said: " + i.FilesError
			}
			add(CodeNoAgent, sev, "instance "+i.Name, seen,
				"Install incus-agent in the VM (its distribution's incus-agent package, or the agent from the VM's config drive: mount -t virtiofs config /mnt && /mnt/install.sh) and reboot it; or do those steps' work by hand before the phase (their commands are in "+t.FilesOf(inside)+") and delete the steps.",
				inside...)
		case AgentUnknown:
			add(CodeAgentUnknown, Warning, "instance "+i.Name, i.Name+" is stopped: whether its agent runs, and what it runs, could not be seen",
				"Start it and run migrate init again into another directory, or check by hand; the move starts nothing it finds stopped.")
		}
	}

	// boot.autostart: a reboot of the host would start a stopped old VM
	// beside the node that replaced it.
	for _, name := range sortedKeys(inMove) {
		i := h.Instance(name)
		if i != nil && i.Autostart {
			st := t.stopStep(inMove[name])
			add(CodeAutostart, Info, "instance "+name, name+" has boot.autostart = true, and the move stops it ("+st+", phase "+t.PhaseOf(st)+")",
				"Nothing to do: that step sets boot.autostart to false, so a reboot of the host does not start the old VM beside the Talos node, and rollback sets it back to true.")
		}
	}
	for _, i := range h.Instances {
		if _, ok := inMove[i.Name]; ok {
			continue
		}
		add(CodeNotInMove, Info, "instance "+i.Name, fmt.Sprintf("%s (%s, %s) is not part of the move", i.Name, i.Type, strings.ToLower(i.Status)),
			"The runbook leaves it as it is; if it should move too, add its steps to main.hcl.")
	}

	// The applications as installed.
	fs = append(fs, checkApps(h, s)...)

	// Room in the pools.
	fs = append(fs, checkPools(h, s, inMove)...)

	// The LAN.
	if s.LANBridge == "" && s.LANNetwork == "" {
		var names []string
		for _, n := range h.Networks {
			names = append(names, fmt.Sprintf("%s (%s, %s)", n.Name, n.Type, managed(n)))
		}
		add(CodeNoLANBridge, Blocker, "networks", "no bridge to the LAN: the host has "+strings.Join(names, ", ")+"; a managed bridge with NAT keeps the node off the LAN",
			"The Talos VM must be on the LAN (Talos' API, Kubernetes, Samba and the router's forwards reach it there): make a bridge of the LAN interface (IncusOS: give the interface the instances role in its network configuration, and set "+vn(VarLANBridge)+"; or, after IncusOS's direct-attach tutorial, set "+vn(VarLANNetwork)+" to the managed physical network on it; elsewhere: a bridge with the NIC in it, then "+vn(VarLANBridge)+").")
	}

	// The data volume.
	switch v := h.Volume(s.DataPool, s.DataVolume); {
	case s.DataVolume == "":
		add(CodeNoDataVolume, Blocker, "data volume", "no custom filesystem volume on the host holds the data",
			"Make one on the data disks (incus storage volume create POOL data) and copy the photos, files and recordings into it, then set "+vn(VarDataPool)+" and "+vn(VarDataVolume)+".")
	case v != nil:
		var others []string
		for _, u := range v.UsedBy {
			if _, ok := inMove[u]; !ok {
				others = append(others, u)
			}
		}
		if len(others) > 0 {
			add(CodeVolumeAttached, Warning, "volume "+v.Pool+"/"+v.Name, fmt.Sprintf("%s/%s is attached to %s, which the move does not stop", v.Pool, v.Name, strings.Join(others, ", ")),
				"While the Talos node mounts it too, both write the same files: detach it from them (incus storage volume detach "+v.Pool+" "+v.Name+" INSTANCE) or stop them before the platform phase.")
		}
		for _, u := range v.UsedBy {
			if role, ok := inMove[u]; ok {
				add(CodeVolumeAttached, Info, "volume "+v.Pool+"/"+v.Name, fmt.Sprintf("%s/%s is attached to %s already", v.Pool, v.Name, u),
					fmt.Sprintf("The runbook attaches it again for the export (%s, at /mnt/migrate-data) and removes that device on rollback; the old device stays.", t.deviceStep(role)))
			}
		}
	}
	return fs
}

func checkPools(h *Host, s Site, inMove map[string]string) []Finding {
	var fs []Finding
	need := map[string][]string{}
	size := map[string]int64{}
	if s.StoragePool != "" {
		for _, d := range s.Template.Disks {
			need[s.StoragePool] = append(need[s.StoragePool], d.What)
			size[s.StoragePool] += d.Size
		}
	}
	// The snapshots the move takes of the old VMs (snapshot_before): a
	// dir pool copies the whole root; a copy-on-write pool's snapshot of
	// a VM that stays stopped stays small.
	for _, name := range sortedKeys(inMove) {
		i := h.Instance(name)
		if i == nil || i.RootPool == "" {
			continue
		}
		if p := h.Pool(i.RootPool); p != nil && p.Driver == "dir" && i.RootUsage > 0 {
			need[p.Name] = append(need[p.Name], fmt.Sprintf("the snapshot of %s (a dir pool copies its %s root)", name, SizeString(i.RootUsage)))
			size[p.Name] += i.RootUsage
		}
		if len(i.Snapshots) > 0 {
			var total int64
			for _, sn := range i.Snapshots {
				total += sn.Size
			}
			fs = append(fs, Finding{Code: CodeExistingSnapshot, Severity: Info, Subject: "instance " + name,
				Seen: fmt.Sprintf("%s has %d snapshot(s) already (%s)", name, len(i.Snapshots), SizeString(total)),
				Do:   "They stay; the move adds one more before it stops the VM, and rollback can restore that one."})
		}
	}
	for _, pool := range []string{s.StoragePool, s.DataPool} {
		if pool != "" && h.Pool(pool) == nil {
			fs = append(fs, Finding{Code: CodePoolMissing, Severity: Blocker, Subject: "pool " + pool, Seen: "the host has no pool " + pool,
				Do: "Set " + s.Template.Name(VarStoragePool) + " and " + s.Template.Name(VarDataPool) + " to pools of the host (incus storage list)."})
		}
	}
	for _, name := range sortedKeys(need) {
		p := h.Pool(name)
		if p != nil && p.SpaceError != "" {
			fs = append(fs, Finding{Code: CodePoolRoom, Severity: Warning, Subject: "pool " + name,
				Seen: fmt.Sprintf("the space of pool %s (status %s) could not be read: %s; the move makes %s there: %s", name, cmp.Or(p.Status, "unknown"), p.SpaceError, SizeString(size[name]), strings.Join(need[name], ", ")),
				Do:   "Check the pool (incus storage info " + name + "; an Unavailable pool has lost its disks) and that it has room, before a run."})
			continue
		}
		if p == nil || p.Total == 0 || p.Free() >= size[name] {
			continue
		}
		fs = append(fs, Finding{Code: CodePoolRoom, Severity: Blocker, Subject: "pool " + name,
			Seen: fmt.Sprintf("pool %s has %s free of %s; the move makes %s there: %s", name, SizeString(p.Free()), SizeString(p.Total), SizeString(size[name]), strings.Join(need[name], ", ")),
			Do:   "Free room in it (old snapshots: incus snapshot delete), or set " + s.Template.Name(VarStoragePool) + " to a pool with room, or make the runbook's disks smaller (main.hcl: the sizes of " + strings.Join(s.Template.Steps("host", "disks"), ", ") + ", and the CEL size range in patches/node.yaml)."})
	}
	return fs
}

// roleSteps are the steps that name a role's VM.
func (t *Template) roleSteps(role string) []string {
	steps := t.inside(role)
	if d := t.deviceStep(role); d != "" {
		steps = append(steps, d)
	}
	return append(steps, t.stopStep(role))
}

func managed(n Network) string {
	switch {
	case !n.Managed:
		return "the host's own"
	case n.NAT:
		return "managed, NAT"
	}
	return "managed"
}

// Sort orders findings: blockers first, then warnings, guesses, infos.
func Sort(fs []Finding) {
	rank := map[string]int{Blocker: 0, Warning: 1, Guess: 2, Info: 3}
	slices.SortStableFunc(fs, func(a, b Finding) int { return rank[a.Severity] - rank[b.Severity] })
}
