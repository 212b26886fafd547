package scaffold

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/inventory"
)

// siteHCL is site.auto.hcl: the host's names as the runbook's variables,
// each with where it came from, and a TODO for what only the user knows.
func siteHCL(in Input) []byte {
	s, h := in.Site, in.Host
	t := s.Template
	vn := t.Name
	var b strings.Builder
	b.WriteString(comment("# ", "# ", fmt.Sprintf("The host as migrate init read it on %s: %s. These values win over main.hcl's defaults and MIGRATE_VAR_* (a --var or --var-file wins over them). Change what is wrong; each TODO is for you to settle.", in.Now.Format("2006-01-02"), hostName(in))))
	b.WriteString("\n")
	line := func(name, value, note string) {
		l := fmt.Sprintf("%-20s = %s", name, value)
		if note = oneLine(note); note != "" {
			l += " # " + note
		}
		b.WriteString(l + "\n")
	}
	str := func(name, value, note string) {
		if value == "" {
			return
		}
		line(name, hclString(value), note)
	}
	if in.Address == nil {
		str(vn(inventory.VarRemote), in.Remote, "the incus CLI's remote it was read through")
		b.WriteString("\n")
	}

	b.WriteString("# The old VMs, by what runs in them.\n")
	for _, role := range inventory.Roles {
		name := s.RoleVM(role)
		if s.Omits(role) {
			b.WriteString(comment("# ", "#   ", fmt.Sprintf("%s: no instance runs %s: main.hcl's steps of it are commented out (set %s and uncomment them if there is one).", vn(inventory.RoleVar(role)), roleApps(role), vn(inventory.RoleVar(role)))))
			continue
		}
		if name == "" {
			b.WriteString(comment("# ", "#   ", fmt.Sprintf("TODO: %s: no instance runs %s; set it, or delete the steps that name var.%s (marked TODO in main.hcl).", vn(inventory.RoleVar(role)), roleApps(role), vn(inventory.RoleVar(role)))))
			continue
		}
		str(vn(inventory.RoleVar(role)), name, appsOf(h, name))
	}
	b.WriteString("\n# Storage and network.\n")
	str(vn(inventory.VarStoragePool), s.StoragePool, poolNote(h, s.StoragePool, "the Talos VM's disks and the ISO"))
	str(vn(inventory.VarDataPool), s.DataPool, poolNote(h, s.DataPool, "the data volume's pool"))
	str(vn(inventory.VarDataVolume), s.DataVolume, "shared into the node by virtiofs, mounted at /var/mnt/data")
	if s.LANNetwork != "" {
		str(vn(inventory.VarLANNetwork), s.LANNetwork, "IncusOS's managed physical network on the LAN: the NICs name it")
	}
	if s.LANBridge != "" {
		str(vn(inventory.VarLANBridge), s.LANBridge, "the node's NIC is bridged onto the LAN here")
	} else if s.LANNetwork == "" {
		b.WriteString("# TODO: " + vn(inventory.VarLANBridge) + ": the host has no bridge to the LAN (see migrate init's report).\n")
	}
	if s.IGPUPCI != "" {
		str(vn(inventory.VarIGPUPCI), s.IGPUPCI, gpuNote(h, s.IGPUPCI))
	} else {
		b.WriteString(comment("# ", "#   ", "TODO: "+vn(inventory.VarIGPUPCI)+": the host has no GPU; delete the igpu devices in "+s.Template.FilesOf(s.Template.Steps("host", "gpu"))+" (marked TODO in main.hcl)."))
	}

	b.WriteString("\n# The Talos node.\n")
	str(vn(inventory.VarTalosVersion), in.Talos.Version, "the release secrets/secrets.yaml.age was made for (migrate init --talos-version)")
	if s.NodeCPU > 0 {
		line(vn(inventory.VarNodeCPU), fmt.Sprint(s.NodeCPU), fmt.Sprintf("of the host's %d CPU threads", h.CPUs))
		str(vn(inventory.VarNodeMemory), s.NodeMemory, "of the host's "+inventory.SizeString(h.Memory))
	}
	str(vn(inventory.VarNodeMAC), s.NodeMAC, "new, unused on the host: reserve "+vn(inventory.VarNodeAddress)+" for it in the router")
	str(vn(inventory.VarRehearsalMAC), s.RehearsalMAC, "new: reserve "+vn(inventory.VarRehearsalAddress)+" for it")
	str(vn(inventory.VarRetainUntil), s.RetainUntil, "the old VMs may be deleted after this date")
	if s.MatrixDomain != "" {
		b.WriteString("\n# The homeserver, as its homeserver.yaml names it.\n")
		str(vn(inventory.VarMatrixDomain), s.MatrixDomain, "Synapse's server_name")
		str(vn(inventory.VarMatrixURL), s.MatrixURL, "its public_baseurl: where the internet reaches it")
	}

	appsHCL(&b, t, s.Apps, line, str)

	b.WriteString("\n# What only you know: until you set them, main.hcl's defaults stand (its\n# examples), so a plan works but a run would reach the wrong place.\n")
	for _, name := range slices.Sorted(maps.Keys(s.TODO)) {
		b.WriteString(comment("# ", "#   ", "TODO: "+name+": "+s.TODO[name]+"."))
		b.WriteString("# " + name + " = ...\n")
	}
	return hclwrite.Format([]byte(b.String())) // aligns the = and the comments
}

// oneLine keeps a note on its comment's line: what the host reports
// (a GPU's product, a pool's driver) could hold a newline, and the next
// line would be HCL.
func oneLine(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f || r == '\u2028' || r == '\u2029' || r == ' ' }), " ")
}

func roleApps(role string) string {
	switch role {
	case inventory.RoleServices:
		return "Samba, Jellyfin or Frigate"
	case inventory.RoleMatrix:
		return "Synapse"
	}
	return "k3s"
}

func appsOf(h *inventory.Host, name string) string {
	i := h.Instance(name)
	if i == nil {
		return ""
	}
	var apps []string
	for _, a := range i.Apps {
		apps = append(apps, a.Name)
	}
	if len(apps) == 0 {
		return "by its name: what it runs was not seen (TODO: check)"
	}
	return strings.Join(apps, ", ")
}

func poolNote(h *inventory.Host, pool, what string) string {
	p := h.Pool(pool)
	if p == nil {
		return what
	}
	if p.Total > 0 {
		return fmt.Sprintf("%s (%s, %s free)", what, p.Driver, inventory.SizeString(p.Free()))
	}
	return fmt.Sprintf("%s (%s)", what, p.Driver)
}

func gpuNote(h *inventory.Host, pci string) string {
	for _, g := range h.GPUs {
		if g.PCIAddress == pci {
			return strings.TrimSpace(fmt.Sprintf("%s %s, driver %s", g.Vendor, g.Product, g.Driver))
		}
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// appsHCL writes the applications' variables: each release as the old VM
// runs it (the floor not_older holds the image to) and the image, never
// older; how each is installed; the names its settings hold (paths,
// users: read in the VM, so written as HCL values, never spliced).
func appsHCL(b *strings.Builder, t *inventory.Template, a inventory.AppsSite, line func(name, value, note string), str func(name, value, note string)) {
	b.WriteString("\n# The applications, as the old VMs run them: an image is never older than\n# what ran there (its database is migrated one way); the plan refuses one.\n")
	vn := t.Name
	release := func(app string, r inventory.AppSite) {
		version, image := vn(inventory.AppVar(app, "version")), vn(inventory.AppVar(app, "image"))
		if r.Version == "" {
			b.WriteString(comment("# ", "#   ", fmt.Sprintf("TODO: %s: %s's release could not be read (see migrate init's report): set it to what the old VM runs, or nothing holds %s to it.", version, app, image)))
			return
		}
		str(version, r.Version, "read in the old VM")
		note := "the example's: " + r.Version + " or newer"
		if r.Raised {
			note = "raised from the example's " + t.ExampleImage(app) + " to the old VM's release"
		}
		str(image, r.Image, note)
	}
	release("Jellyfin", a.Jellyfin)
	release("Synapse", a.Synapse)
	release("Frigate", a.Frigate)
	str(vn(inventory.VarSynapseDatabase), a.SynapseDatabase, "Synapse's database.name: psycopg2 is PostgreSQL")
	str(vn(inventory.VarFrigateInstall), a.FrigateInstall, "compose: stopped with docker compose, no frigate.service")
	str(vn(inventory.VarJellyfinHWAccel), a.JellyfinHWAccel, "as the old Jellyfin was set; the move turns VA-API on where the node has the render node")
	str(vn(inventory.VarFrigateHWAccel), a.FrigateHWAccel, "the old Frigate's hwaccel_args")
	list := func(name string, vals []string, note string) {
		if len(vals) == 0 {
			return
		}
		elems := make([]cty.Value, len(vals))
		for i, v := range vals {
			elems[i] = cty.StringVal(v)
		}
		line(name, strings.TrimSpace(string(hclwrite.TokensForValue(cty.ListVal(elems)).Bytes())), note)
	}
	list(vn(inventory.VarJellyfinLibraryPaths), a.JellyfinLibraryPaths, "its libraries' paths (root/default/*/options.xml)")
	list(vn(inventory.VarSambaUsers), a.SambaUsers, "pdbedit -L: names only")
}
