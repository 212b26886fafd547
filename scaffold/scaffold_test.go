package scaffold_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/examples/homelab"
	"github.com/homelab-migrate/migrate/inventory"
	"github.com/homelab-migrate/migrate/scaffold"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

func input(t *testing.T) (scaffold.Input, *age.X25519Identity) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	host := &inventory.Host{Target: "https://192.168.1.10:8443", Server: inventory.Server{Name: "incusos"}, CPUs: 8, Memory: 32 << 30,
		Pools:     []inventory.Pool{{Name: "local", Driver: "zfs", Total: 1 << 40, Used: 1 << 38}},
		Instances: []inventory.Instance{{Name: "services", Type: "virtual-machine", Status: "Running", Apps: []inventory.App{{Name: "Jellyfin"}}}}}
	site := inventory.Site{StoragePool: "local", DataPool: "tank", DataVolume: "data", LANBridge: "enp5s0", ServicesVM: "services", MatrixVM: "matrix",
		NodeCPU: 6, NodeMemory: "24GiB", NodeMAC: "10:66:6a:00:00:01", RehearsalMAC: "10:66:6a:00:00:02", RetainUntil: "2027-02-02",
		TODO: map[string]string{"node_address": "the address your router reserves"}, Template: tmpl(t)}
	site.Omit = map[string]string{"incus_instance_state.old_k3s": "no instance runs k3s"}
	fs := []inventory.Finding{{Code: inventory.CodeNoAgent, Severity: inventory.Blocker, Subject: "instance services", Seen: "no agent", Do: "Stop Jellyfin by hand.",
		Steps: []string{"group.jellyfin.incus_exec.stop", "group.jellyfin.incus_exec.export"}}}
	return scaffold.Input{Host: host, Site: site, Findings: fs, Remote: "incusos", Recipients: []string{id.Recipient().String()},
		Talos: scaffold.TalosSecrets{Bundle: []byte("cluster: the bundle\n"), Talosconfig: []byte("context: home\n")},
		Now:   time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}, id
}

func TestRender(t *testing.T) {
	in, id := input(t)
	files, err := scaffold.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]scaffold.File{}
	for _, f := range files {
		byPath[f.Path] = f
	}
	for _, p := range []string{"main.hcl", "site.auto.hcl", ".age-recipients", ".gitignore", "patches/node.yaml", "charts/app/Chart.yaml",
		"secrets/secrets.yaml.age", "secrets/talosconfig.age", "secrets/ci-runner-token.age", "secrets.auto.hcl.age", "secrets/README.md"} {
		if _, ok := byPath[p]; !ok {
			t.Errorf("no %s among %d files", p, len(files))
		}
	}
	// The demo's secrets and identity stay behind.
	for p := range byPath {
		if strings.Contains(p, "demo") {
			t.Errorf("the demo's %s was copied", p)
		}
	}
	// Every secret is sealed, to the recipient, and only there in clear
	// once opened.
	for p, want := range map[string]string{"secrets/secrets.yaml.age": "cluster: the bundle\n", "secrets/talosconfig.age": "context: home\n"} {
		f := byPath[p]
		if f.Mode != 0o600 || !agefile.IsEncrypted(f.Data) {
			t.Fatalf("%s is not sealed (mode %o)", p, f.Mode)
		}
		clear, err := agefile.Decrypt(f.Data, id)
		if err != nil || string(clear) != want {
			t.Errorf("%s opens to %q, %v", p, clear, err)
		}
	}
	reg, err := agefile.Decrypt(byPath["secrets.auto.hcl.age"].Data, id)
	if err != nil || !strings.Contains(string(reg), "synapse_registration_secret = \"") {
		t.Errorf("the registration secret: %v", err)
	}
	if other, _ := scaffold.Render(in); string(mustOpen(t, other, "secrets.auto.hcl.age", id)) == string(reg) {
		t.Error("two runbooks got the same registration secret")
	}

	site := string(byPath["site.auto.hcl"].Data)
	f, diags := hclsyntax.ParseConfig([]byte(site), "site.auto.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatalf("site.auto.hcl does not parse: %v\n%s", diags, site)
	}
	attrs, _ := f.Body.JustAttributes()
	for name, want := range map[string]string{"incus_remote": "incusos", "storage_pool": "local", "data_volume": "data", "lan_bridge": "enp5s0",
		"services_vm": "services", "node_mac": "10:66:6a:00:00:01", "node_memory": "24GiB", "retain_old_vms_until": "2027-02-02"} {
		a, ok := attrs[name]
		if !ok {
			t.Errorf("site.auto.hcl lacks %s:\n%s", name, site)
			continue
		}
		if v, _ := a.Expr.Value(nil); v.AsString() != want {
			t.Errorf("%s = %s, want %q", name, v.GoString(), want)
		}
	}
	for _, want := range []string{"TODO: node_address: the address your router reserves", "# k3s_vm: no instance runs k3s: main.hcl's steps of it are commented out", "# node_address = ..."} {
		if !strings.Contains(site, want) {
			t.Errorf("site.auto.hcl lacks %q:\n%s", want, site)
		}
	}
	if _, ok := attrs["node_address"]; ok {
		t.Error("node_address is guessed instead of left to the user")
	}
	main := string(byPath["main.hcl"].Data)
	if !strings.HasPrefix(main, "# Written by migrate init on 2026-12-02 from incusos") ||
		strings.Count(main, "Stop Jellyfin by hand.") != 1 || // before the call of the group of the two steps, once
		!strings.Contains(main, "  # TODO(migrate init): Stop Jellyfin by hand.\n  group \"jellyfin\" {") ||
		strings.Contains(main, "demo-identity") {
		t.Errorf("main.hcl's header, TODO or identity:\n%s", main[:min(len(main), 600)])
	}
	// The step of the role the host lacks is left out, commented, with
	// why; main.hcl still parses, and has no such step.
	const omitted = "  # migrate init left out step incus_instance_state.old_k3s: no instance runs\n  #   k3s.\n" +
		"  # step \"incus_instance_state\" \"old_k3s\" {\n" +
		"  #   instance          = var.k3s_vm\n" +
		"  #   state             = \"stopped\"\n"
	if !strings.Contains(main, omitted) {
		t.Errorf("main.hcl does not leave out old_k3s as %q:\n%s", omitted, main)
	}
	mf, diags := hclsyntax.ParseConfig([]byte(main), "main.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatalf("main.hcl does not parse: %v", diags)
	}
	for _, ph := range mf.Body.(*hclsyntax.Body).Blocks {
		for _, b := range ph.Body.Blocks {
			if b.Type == "step" && b.Labels[1] == "old_k3s" {
				t.Errorf("main.hcl still has step %v at %s", b.Labels, b.Range())
			}
		}
	}
}

func mustOpen(t *testing.T, files []scaffold.File, path string, id age.Identity) []byte {
	t.Helper()
	for _, f := range files {
		if f.Path == path {
			b, err := agefile.Decrypt(f.Data, id)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatalf("no %s", path)
	return nil
}

// TestRenderAddress: a host given by address and certificate files gets
// a provider block naming them.
func TestRenderAddress(t *testing.T) {
	in, _ := input(t)
	in.Project = "home"
	in.Remote, in.Address = "", &scaffold.Address{URL: "https://192.168.1.10:8443", ClientCert: "/home/me/client.crt", ClientKey: "/home/me/client.key", ServerCert: "/home/me/server.crt"}
	files, err := scaffold.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.Path == "main.hcl" {
			for _, want := range []string{`address     = "https://192.168.1.10:8443"`, `client_key  = "/home/me/client.key"`, `server_cert = "/home/me/server.crt"`, `project     = "home" # where migrate init read the old VMs`} {
				if !strings.Contains(string(f.Data), want) {
					t.Errorf("main.hcl lacks %q", want)
				}
			}
			if strings.Contains(string(f.Data), "remote = var.incus_remote") {
				t.Error("main.hcl still names the remote")
			}
		}
		if f.Path == "site.auto.hcl" && strings.Contains(string(f.Data), "incus_remote") {
			t.Error("site.auto.hcl names a remote for a host given by address")
		}
	}
}

// TestWriteNeverOverwrites: a directory that is not empty is refused
// with nothing written; a failure halfway leaves nothing behind.
func TestWriteNeverOverwrites(t *testing.T) {
	in, _ := input(t)
	files, err := scaffold.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = scaffold.Write(dir, files)
	if err == nil || !strings.Contains(err.Error(), "is not empty (it has main.hcl)") {
		t.Fatalf("a directory with a file: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "main.hcl")); string(b) != "mine" {
		t.Error("the user's file was overwritten")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("something was written: %v", entries)
	}

	// A clash in the middle (the same file twice): what was made goes.
	fresh := filepath.Join(t.TempDir(), "new", "runbook")
	clash := append(append([]scaffold.File(nil), files...), files[len(files)/2])
	if err := scaffold.Write(fresh, clash); err == nil {
		t.Fatal("a file written twice")
	}
	if _, err := os.Stat(filepath.Dir(fresh)); !os.IsNotExist(err) {
		t.Errorf("a failed write left %s: %v", filepath.Dir(fresh), err)
	}

	ok := filepath.Join(t.TempDir(), "runbook")
	if err := scaffold.Write(ok, files); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(ok, "secrets", "secrets.yaml.age"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the bundle's file: %v %v", fi, err)
	}
}

// TestSiteApps: site.auto.hcl carries each app's release as read and an
// image never older, how each is installed, the names read in the VMs as
// HCL values, and IncusOS's physical LAN network; inventory's idea of
// the example's images is main.hcl's.
func TestSiteApps(t *testing.T) {
	in, _ := input(t)
	in.Site.Apps = inventory.AppsSite{
		Jellyfin:        inventory.AppSite{Version: "10.10.7+deb12", Image: "jellyfin/jellyfin:10.10.7", Raised: true},
		Synapse:         inventory.AppSite{Version: "1.119.0+bookworm1", Image: "matrixdotorg/synapse:v1.120"},
		SynapseDatabase: "psycopg2", FrigateInstall: "compose", JellyfinHWAccel: "none",
		JellyfinLibraryPaths: []string{"/var/mnt/data/media/movies"}, SambaUsers: []string{"ana", `b"${en}`},
	}
	in.Site.LANNetwork, in.Site.LANBridge = "enp5s0", "" // IncusOS's physical network, after its direct-attach tutorial
	files, err := scaffold.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	var site string
	for _, f := range files {
		if f.Path == "site.auto.hcl" {
			site = string(f.Data)
		}
	}
	parsed, diags := hclsyntax.ParseConfig([]byte(site), "site.auto.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatalf("site.auto.hcl: %v\n%s", diags, site)
	}
	attrs, _ := parsed.Body.JustAttributes()
	for name, want := range map[string]string{"jellyfin_version": "10.10.7+deb12", "jellyfin_image": "jellyfin/jellyfin:10.10.7",
		"synapse_version": "1.119.0+bookworm1", "synapse_image": "matrixdotorg/synapse:v1.120", "synapse_database": "psycopg2", "frigate_install": "compose", "lan_network": "enp5s0"} {
		a, ok := attrs[name]
		if !ok {
			t.Errorf("site.auto.hcl lacks %s:\n%s", name, site)
			continue
		}
		if v, _ := a.Expr.Value(nil); v.AsString() != want {
			t.Errorf("%s = %#v, want %q", name, v, want)
		}
	}
	if v, _ := attrs["samba_users"].Expr.Value(nil); v.LengthInt() != 2 || v.Index(cty.NumberIntVal(1)).AsString() != `b"${en}` {
		t.Errorf("samba_users = %#v", v)
	}
	if strings.Contains(site, "TODO: lan_bridge") {
		t.Errorf("site.auto.hcl asks for a bridge beside the physical network:\n%s", site)
	}
	if !strings.Contains(site, "TODO: frigate_version") || !strings.Contains(site, "raised from the example's jellyfin/jellyfin:10.10.3") {
		t.Errorf("site.auto.hcl does not say what was raised or not read:\n%s", site)
	}

	// The example's images, as main.hcl's defaults.
	main, err := fs.ReadFile(homelab.Runbook(), "main.hcl")
	if err != nil {
		t.Fatal(err)
	}
	for app, image := range map[string]string{"Jellyfin": "jellyfin/jellyfin:10.10.3", "Synapse": "matrixdotorg/synapse:v1.120"} {
		if got := tmpl(t).ExampleImage(app); got != image {
			t.Errorf("the template's image of %s = %q, want %q", app, got, image)
		}
		v := strings.ToLower(app) + "_image"
		decl := fmt.Sprintf("variable %q {\n  type        = string\n  default     = %q\n", v, image)
		if !strings.Contains(string(main), decl) {
			t.Errorf("main.hcl's %s is not %s", v, image)
		}
	}
}

// Input.Patch rewrites the template's Talos patches, and nothing else,
// for the runbook's release (migrate init: the talos program's rewrite).
func TestRenderRewritesPatches(t *testing.T) {
	in, _ := input(t)
	var seen []string
	in.Patch = func(name string, data []byte) ([]byte, error) {
		seen = append(seen, name)
		return append([]byte("# for v1.14.7\n"), data...), nil
	}
	files, err := scaffold.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(seen, " "); got != "patches/node.yaml patches/rehearsal.yaml" {
		t.Errorf("rewritten: %s, want the two patches", got)
	}
	for _, f := range files {
		rewritten := strings.HasPrefix(string(f.Data), "# for v1.14.7\n")
		if rewritten != strings.HasPrefix(f.Path, "patches/") {
			t.Errorf("%s rewritten: %v", f.Path, rewritten)
		}
	}
	in.Patch = func(name string, data []byte) ([]byte, error) { return nil, fmt.Errorf("the talos program failed") }
	if _, err := scaffold.Render(in); err == nil || !strings.Contains(err.Error(), "the talos program failed") {
		t.Errorf("a failed rewrite: %v", err)
	}
}

// A service whose stop step migrate init leaves out is commented out with
// it (the loader would refuse a service naming an undeclared step); the
// others stay.
func TestRenderOmitsServiceWithItsStop(t *testing.T) {
	in, _ := input(t)
	in.Site.Omit["incus_exec.stop_synapse"] = "no instance runs Synapse"
	files, err := scaffold.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	var main string
	for _, f := range files {
		if f.Path == "main.hcl" {
			main = string(f.Data)
		}
	}
	if !strings.Contains(main, "# migrate init left out service \"matrix\" with its steps.\n# service \"matrix\" {") {
		t.Errorf("service matrix is not commented out:\n%s", main[strings.Index(main, "What the household"):])
	}
	if !strings.Contains(main, "\nservice \"jellyfin\" {") {
		t.Error("service jellyfin was left out too")
	}
}
