package inventory_test

import (
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/homelab-migrate/migrate/examples/homelab"
	"github.com/homelab-migrate/migrate/inventory"
)

// templateCopy is examples/homelab in memory, its main.hcl changed by edit.
func templateCopy(t *testing.T, edit func(main string) string) fstest.MapFS {
	t.Helper()
	out := fstest.MapFS{}
	err := fs.WalkDir(homelab.Runbook(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(homelab.Runbook(), p)
		if p == "main.hcl" {
			changed := edit(string(b))
			if changed == string(b) {
				t.Fatal("the edit changed nothing in main.hcl")
			}
			b = []byte(changed)
		}
		out[p] = &fstest.MapFile{Data: b}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// lineOf is the file:line of the first line of main.hcl holding s
// (after from, when given).
func lineOf(t *testing.T, main, from, s string) string {
	t.Helper()
	at := strings.Index(main, from)
	i := strings.Index(main[at:], s)
	if at < 0 || i < 0 {
		t.Fatalf("main.hcl has no %q after %q", s, from)
	}
	return fmt.Sprintf("main.hcl:%d", strings.Count(main[:at+i], "\n")+1)
}

func rename(src, old, new string) string {
	return regexp.MustCompile(`\b`+regexp.QuoteMeta(old)+`\b`).ReplaceAllString(src, new)
}

// TestTemplateDisagrees: a template that no longer has what migrate init
// reads of it fails LoadTemplate (the first thing init does), naming the
// role and the file and line to look at, instead of a runbook written
// with steps and variables the template lacks.
func TestTemplateDisagrees(t *testing.T) {
	main := string(must(fs.ReadFile(homelab.Runbook(), "main.hcl")))
	for _, tc := range []struct {
		name string
		edit func(string) string
		want []string
	}{
		{"a step renamed", func(s string) string {
			// Its references too, but not the role's.
			s = strings.Replace(s, `step "incus_instance_state" "old_services"`, `step "incus_instance_state" "old_services_vm"`, 1)
			return s
		}, []string{"Role Names an Undeclared Step", `role "services"`, "incus_instance_state.old_services", lineOf(t, main, `role "services"`, "  stop ")}},
		{"a role gone", func(s string) string {
			i := strings.Index(s, `role "k3s"`)
			j := i + strings.Index(s[i:], "}\n") + 2
			return s[:i] + s[j:]
		}, []string{`no role "k3s"`, "vm", lineOf(t, main, "", `role "services"`)}},
		{"a part gone", func(s string) string {
			return strings.Replace(s, "  stop = incus_instance_state.old_k3s\n", "", 1)
		}, []string{`role "k3s" has no part stop`, "a step", lineOf(t, main, "", `role "k3s"`)}},
		{"a part of another kind", func(s string) string {
			return strings.Replace(s, "  stop = incus_instance_state.old_k3s\n", "  stop = var.k3s_vm\n", 1)
		}, []string{`part stop of role "k3s" must name a step`, lineOf(t, main, `role "k3s"`, "  stop ")}},
		{"a step of an old VM not in its role", func(s string) string {
			// As the hard-coded list of the old init missed four.
			return strings.Replace(s, ", incus_exec.stop_samba, ", ", ", 1)
		}, []string{"step incus_exec.stop_samba names var.services_vm", `role "services" does not list it`, lineOf(t, main, "", `step "incus_exec" "stop_samba"`)}},
		{"a variable renamed without its role", func(s string) string {
			s = strings.Replace(s, `variable "node_mac"`, `variable "node_hwaddr"`, 1)
			return strings.ReplaceAll(s, "hwaddr = var.node_mac", "hwaddr = var.node_hwaddr")
		}, []string{"Role Names an Undeclared Variable", `role "node"`, "var.node_mac", lineOf(t, main, `role "node"`, "  mac ")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadTemplate(templateCopy(t, tc.edit))
			if err == nil {
				t.Fatal("the template loads")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestTemplateVariableRenamed: a variable and a step renamed with their
// role are what init then says and writes; no name of the example is
// built in.
func TestTemplateVariableRenamed(t *testing.T) {
	tm, err := loadTemplate(templateCopy(t, func(s string) string {
		s = rename(s, "node_address", "node_ip")
		s = rename(s, "var.storage_pool", "var.vm_pool") // the variable; the role's part keeps its name
		s = strings.Replace(s, `variable "storage_pool"`, `variable "vm_pool"`, 1)
		s = rename(s, "old_services", "services_stopped")
		return rename(s, "stop_samba", "halt_samba")
	}))
	if err != nil {
		t.Fatal(err)
	}
	h := brief()
	h.Instances[0].Agent = inventory.AgentAbsent
	h.Instances[0].Autostart = true
	h.Pools[0].Total, h.Pools[0].Used = 100<<30, 90<<30
	site, guesses, err := inventory.Choose(tm, h, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := site.TODO["node_ip"]; !ok {
		t.Errorf("TODO = %v, want node_ip", site.TODO)
	}
	fs := append(guesses, inventory.Check(h, site)...)
	noAgent := findingsOf(fs, inventory.CodeNoAgent)
	if len(noAgent) != 1 || !slices.Contains(noAgent[0].Steps, "incus_exec.halt_samba") || slices.Contains(noAgent[0].Steps, "incus_exec.stop_samba") {
		t.Errorf("no-agent = %+v, want incus_exec.halt_samba among its steps", noAgent)
	}
	if !has(fs, inventory.CodeAutostart, inventory.Info, "instance services", "incus_instance_state.services_stopped, phase cleanup") {
		t.Errorf("autostart does not name the renamed stop step: %+v", findingsOf(fs, inventory.CodeAutostart))
	}
	room := findingsOf(fs, inventory.CodePoolRoom)
	if len(room) != 1 || !strings.Contains(room[0].Do, "set vm_pool to a pool with room") || !strings.Contains(room[0].Seen, "group.node.incus_instance.vm (64GiB)") {
		t.Errorf("pool-room = %+v, want it to name vm_pool and the Talos disk's size", room)
	}
}

// TestTemplateSizes: the disks' sizes are the template's.
func TestTemplateSizes(t *testing.T) {
	var total int64
	for _, d := range tmpl(t).Disks {
		total += d.Size
	}
	if want := int64(64+150+16)<<30 + 100<<20; total != want {
		t.Errorf("disks = %+v, %d bytes in all, want %d", tmpl(t).Disks, total, want)
	}
	tm, err := loadTemplate(templateCopy(t, func(s string) string {
		return strings.Replace(s, `size         = "150GiB"`, `size         = "300GiB"`, 1)
	}))
	if err != nil {
		t.Fatal(err)
	}
	var bulk int64
	for _, d := range tm.Disks {
		if strings.Contains(d.What, "incus_volume.bulk") {
			bulk = d.Size
		}
	}
	if bulk != 300<<30 {
		t.Errorf("the bulk disk = %d bytes, want 300GiB: %+v", bulk, tm.Disks)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestTemplateFilesOf: what init tells a person to edit names the files
// the steps are in, a group's file too (the iGPU devices of the Talos VMs
// are in groups/talos-node, called twice).
func TestTemplateFilesOf(t *testing.T) {
	tm := tmpl(t)
	if got, want := tm.FilesOf(tm.Steps("host", "gpu")), "main.hcl and groups/talos-node/main.hcl"; got != want {
		t.Errorf("the files of the gpu steps = %q, want %q", got, want)
	}
	if got := tm.FilesOf([]string{"incus_volume.bulk", "incus_volume.talos_iso"}); got != "main.hcl" {
		t.Errorf("the files of the volumes = %q, want main.hcl", got)
	}
}
