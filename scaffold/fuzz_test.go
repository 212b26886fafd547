package scaffold_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/inventory"
	"github.com/homelab-migrate/migrate/scaffold"
)

// FuzzRender: whatever names and words the host reports (an instance,
// a pool, a GPU's product, a finding's advice), the written files are
// HCL that parses, and site.auto.hcl gives back exactly the names: no
// name can end a string or a comment and write HCL of its own.
func FuzzRender(f *testing.F) {
	f.Add("services", "local", "UHD Graphics", "Delete the steps.")
	f.Add(`a"b${c}`, "po\nol = \"x\"", "x\n node_address = \"1.2.3.4\"", "%{ if x }\n*/ /*")
	f.Add("vm\r\n# x", "\x00\x1b[31m", "\u2028igpu_pci = 1", "\\")
	f.Fuzz(func(t *testing.T, vm, pool, product, advice string) {
		for _, s := range []string{vm, pool, product, advice} {
			if !utf8.ValidString(s) {
				t.Skip("the daemon's JSON holds UTF-8 only")
			}
		}
		in, _ := input(t)
		in.Site.ServicesVM, in.Site.StoragePool, in.Site.IGPUPCI = vm, pool, "0000:00:02.0"
		in.Host.GPUs = []inventory.GPUCard{{PCIAddress: "0000:00:02.0", Product: product, Vendor: vm}}
		in.Host.Instances = append(in.Host.Instances, inventory.Instance{Name: vm, Apps: []inventory.App{{Name: product}}})
		in.Host.Pools = append(in.Host.Pools, inventory.Pool{Name: pool, Driver: product})
		in.Findings = append(in.Findings, inventory.Finding{Do: advice + product, Steps: []string{"group.node.incus_instance.vm"}})
		// What the VMs' own files say: users, paths, versions.
		in.Site.Apps = inventory.AppsSite{SambaUsers: []string{product, vm}, JellyfinLibraryPaths: []string{advice},
			Jellyfin: inventory.AppSite{Version: pool, Image: "jellyfin/jellyfin:" + vm}, FrigateHWAccel: product}
		files, err := scaffold.Render(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			if !strings.HasSuffix(file.Path, ".hcl") {
				continue
			}
			parsed, diags := hclsyntax.ParseConfig(file.Data, file.Path, hcl.InitialPos)
			if diags.HasErrors() {
				t.Fatalf("%s does not parse: %v\n%s", file.Path, diags, file.Data)
			}
			if file.Path != "site.auto.hcl" {
				continue
			}
			attrs, diags := parsed.Body.JustAttributes()
			if diags.HasErrors() {
				t.Fatalf("site.auto.hcl: %v", diags)
			}
			for name, want := range map[string]string{"services_vm": vm, "storage_pool": pool, "igpu_pci": "0000:00:02.0", "node_mac": in.Site.NodeMAC} {
				a, ok := attrs[name]
				if want == "" {
					continue
				}
				if !ok {
					t.Fatalf("site.auto.hcl lost %s:\n%s", name, file.Data)
				}
				v, diags := a.Expr.Value(nil)
				// HCL strings are NFC-normalized, as cty's.
				if diags.HasErrors() || v.AsString() != cty.StringVal(want).AsString() {
					t.Fatalf("%s = %#v (%v), want %q:\n%s", name, v, diags, want, file.Data)
				}
			}
			if v, diags := attrs["samba_users"].Expr.Value(nil); diags.HasErrors() || v.LengthInt() != 2 || v.Index(cty.NumberIntVal(0)).AsString() != cty.StringVal(product).AsString() {
				t.Fatalf("samba_users = %#v (%v), want [%q, %q]:\n%s", v, diags, product, vm, file.Data)
			}
			if _, ok := attrs["node_address"]; ok {
				t.Fatalf("a name wrote node_address:\n%s", file.Data)
			}
		}
	})
}
