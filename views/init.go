package views

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"

	wordwrap "github.com/mitchellh/go-wordwrap"

	"github.com/homelab-migrate/migrate/inventory"
	"github.com/homelab-migrate/migrate/secret"
)

// InitReport is what `migrate init` found and wrote.
type InitReport struct {
	Host     *inventory.Host     `json:"host"`
	Site     inventory.Site      `json:"site"`
	Findings []inventory.Finding `json:"findings"`
	Dir      string              `json:"dir"`
	Files    []string            `json:"files"` // written, relative to Dir
}

// InitJSON prints the report as one JSON document.
func (v *View) InitJSON(r InitReport) error {
	enc := json.NewEncoder(v.out)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Init prints the report for a person: the host in a few lines, the
// findings (blockers first), each with what to do, and what was written.
func (v *View) Init(r InitReport) {
	st, h := v.st, r.Host
	fmt.Fprintf(v.out, "%s %s", st.bold("Read"), h.Target)
	if h.Server.Name != "" {
		fmt.Fprintf(v.out, " (%s, Incus %s)", h.Server.Name, h.Server.Version)
	}
	fmt.Fprintln(v.out, ":")
	for _, i := range h.Instances {
		var parts []string
		parts = append(parts, i.Type, strings.ToLower(i.Status))
		if i.Autostart {
			parts = append(parts, "autostart")
		}
		if g := i.GPUDevices(); len(g) > 0 {
			parts = append(parts, "gpu "+strings.Join(g, ","))
		} else if i.VM() {
			parts = append(parts, "no gpu")
		}
		if i.VM() {
			parts = append(parts, "agent "+i.Agent)
		}
		if len(i.Snapshots) > 0 {
			parts = append(parts, fmt.Sprintf("%d snapshot(s)", len(i.Snapshots)))
		}
		var apps []string
		for _, a := range i.Apps {
			apps = append(apps, a.Name)
		}
		if len(apps) > 0 {
			parts = append(parts, "runs "+strings.Join(apps, ", "))
		}
		fmt.Fprintf(v.out, "  instance %-12s %s\n", i.Name, strings.Join(parts, ", "))
		for _, a := range i.Apps {
			if a.Facts != nil {
				fmt.Fprint(v.out, wrapIndent(appLine(a.Name, a.Facts), "           app ", "               ", v.width))
			}
		}
	}
	for _, p := range h.Pools {
		room := ""
		switch {
		case p.SpaceError != "":
			room = ", its space unknown (" + strings.ToLower(cmp.Or(p.Status, "unreadable")) + ")"
		case p.Total > 0:
			room = fmt.Sprintf(", %s free of %s", inventory.SizeString(p.Free()), inventory.SizeString(p.Total))
		}
		var vols []string
		for _, vol := range p.Volumes {
			vols = append(vols, vol.Name)
		}
		vs := ""
		if len(vols) > 0 {
			vs = ", volumes " + strings.Join(vols, ", ")
		}
		fmt.Fprintf(v.out, "  pool     %-12s %s%s%s\n", p.Name, p.Driver, room, vs)
	}
	for _, n := range h.Networks {
		kind := n.Type + ", the host's own"
		if n.Managed {
			kind = n.Type + ", managed"
			if n.NAT {
				kind += ", NAT"
			}
			if n.DHCP {
				kind += ", DHCP"
			}
		}
		fmt.Fprintf(v.out, "  network  %-12s %s\n", n.Name, kind)
	}
	for _, g := range h.GPUs {
		fmt.Fprintf(v.out, "  gpu      %-12s %s %s (driver %s)\n", g.PCIAddress, g.Vendor, g.Product, orNone(g.Driver))
	}
	for _, d := range h.Disks {
		fmt.Fprintf(v.out, "  disk     %-12s %s %s %s\n", d.ID, d.Type, inventory.SizeString(d.Size), d.Model)
	}

	fmt.Fprintf(v.out, "\n%s\n", st.bold(fmt.Sprintf("Findings: %d blocker(s), %d warning(s), %d guess(es), %d note(s)",
		inventory.Count(r.Findings, inventory.Blocker), inventory.Count(r.Findings, inventory.Warning),
		inventory.Count(r.Findings, inventory.Guess), inventory.Count(r.Findings, inventory.Info))))
	for _, f := range r.Findings {
		label := map[string]func(string) string{inventory.Blocker: st.red, inventory.Warning: st.yellow, inventory.Guess: st.cyan, inventory.Info: st.dim}[f.Severity]
		if label == nil {
			label = st.bold
		}
		fmt.Fprintf(v.out, "  %s %s [%s]\n", label(strings.ToUpper(f.Severity)), f.Subject, f.Code)
		fmt.Fprint(v.out, wrapIndent(secret.Visible(f.Seen), "    seen: ", "          ", v.width)) // it quotes what the host and its VMs hold
		fmt.Fprint(v.out, wrapIndent(f.Do, "    do:   ", "          ", v.width))
		if len(f.Steps) > 0 && r.Dir != "" {
			fmt.Fprint(v.out, wrapIndent("marked TODO in main.hcl: "+strings.Join(f.Steps, ", "), "          ", "          ", v.width))
		}
	}

	if r.Dir != "" {
		fmt.Fprintf(v.out, "\n%s %s: %d files (%s).\n", st.bold("Wrote"), r.Dir, len(r.Files), strings.Join(topLevel(r.Files), ", "))
		fmt.Fprintf(v.out, "Next: settle the TODOs in %s/site.auto.hcl and main.hcl, then\n  migrate validate --runbook %s\n  migrate plan --runbook %s\n", r.Dir, r.Dir, r.Dir)
		if r.Site.NodeMAC != "" && r.Site.RehearsalMAC != "" {
			node, rehearsal := "the node's address", "the rehearsal VM's"
			if t := r.Site.Template; t != nil { // the written runbook's names
				node, rehearsal = t.Name(inventory.VarNodeAddress), t.Name(inventory.VarRehearsalAddress)
			}
			fmt.Fprintf(v.out, "Before a run, make your router's DHCP reserve %s for %s and %s for %s (the Talos VMs' new MACs).\n", node, r.Site.NodeMAC, rehearsal, r.Site.RehearsalMAC)
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// topLevel are the first path elements of files, in order, once each.
func topLevel(files []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, f := range files {
		top, rest, isDir := strings.Cut(f, "/")
		if isDir && rest != "" {
			top += "/"
		}
		if !seen[top] {
			seen[top] = true
			out = append(out, top)
		}
	}
	return out
}

// wrapIndent wraps text to width: the first line after first, the others
// after rest.
func wrapIndent(text, first, rest string, width int) string {
	lines := strings.Split(wordwrap.WrapString(strings.Join(strings.Fields(text), " "), uint(max(width-len(first), 20))), "\n")
	for i := range lines {
		prefix := rest
		if i == 0 {
			prefix = first
		}
		lines[i] = strings.TrimRight(prefix+lines[i], " ")
	}
	return strings.Join(lines, "\n") + "\n"
}

// appLine says how an application is installed: kind, version, database
// engine, config files, paths, users and hardware decoding.
func appLine(name string, f *inventory.AppFacts) string {
	kind := map[string]string{inventory.KindDebian: "Debian package", inventory.KindCompose: "Compose project", inventory.KindService: "systemd unit", inventory.KindBinary: "by hand"}[f.Kind]
	parts := []string{fmt.Sprintf("%s %s (%s)", name, cmp.Or(f.Version, "version unknown"), strings.TrimSpace(kind+" "+f.Package))}
	if d := f.Database; d != nil {
		db := "SQLite " + d.Path
		if d.Engine == inventory.EnginePostgreSQL {
			db = fmt.Sprintf("PostgreSQL %s on %s", d.Name, cmp.Or(d.Host, "localhost"))
		}
		parts = append(parts, "database "+db)
	}
	if len(f.ConfigFiles) > 0 {
		parts = append(parts, "config "+strings.Join(f.ConfigFiles, " "))
	}
	if len(f.LibraryPaths) > 0 {
		parts = append(parts, "paths "+strings.Join(f.LibraryPaths, " "))
	}
	if len(f.Users) > 0 {
		parts = append(parts, "users "+strings.Join(f.Users, " "))
	}
	if name == "Jellyfin" || name == "Frigate" {
		parts = append(parts, "hardware decoding "+cmp.Or(f.HWAccel, "off"))
	}
	return secret.Visible(strings.Join(parts, "; ")) // names from the VM: its controls shown, not obeyed
}
