package scaffold_test

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"

	"filippo.io/age"

	"github.com/homelab-migrate/migrate/examples/homelab"
	"github.com/homelab-migrate/migrate/inventory"
	"github.com/homelab-migrate/migrate/runbooks"
	"github.com/homelab-migrate/migrate/scaffold"
)

// renamedTemplate is examples/homelab with variables and a step renamed,
// their roles with them.
func renamedTemplate(t *testing.T) *inventory.Template {
	t.Helper()
	out := fstest.MapFS{}
	err := fs.WalkDir(homelab.Runbook(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(homelab.Runbook(), p)
		if p == "main.hcl" {
			s := string(b)
			for old, new := range map[string]string{"node_address": "node_ip", "services_vm": "media_vm", "stop_samba": "halt_samba", "old_k3s": "k3s_stopped"} {
				s = regexp.MustCompile(`\b`+old+`\b`).ReplaceAllString(s, new)
			}
			b = []byte(s)
		}
		out[p] = &fstest.MapFile{Data: b}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	tm, err := inventory.LoadTemplate(out, schemas())
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// TestRenderFollowsRenamedVariables: what scaffold writes names the
// template's variables and steps as the template names them, and the
// runbook it writes loads (roles and all).
func TestRenderFollowsRenamedVariables(t *testing.T) {
	in, id := input(t)
	in.Site.Template = renamedTemplate(t)
	in.Site.TODO = map[string]string{"node_ip": "the address your router reserves"}
	in.Site.Omit = map[string]string{"incus_instance_state.k3s_stopped": "no instance runs k3s"}
	in.Findings[0].Do, in.Findings[0].Steps = "Stop Samba by hand.", []string{"incus_exec.halt_samba"}
	files, err := scaffold.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string][]byte{}
	mfs := fstest.MapFS{}
	for _, f := range files {
		byPath[f.Path] = f.Data
		mfs[f.Path] = &fstest.MapFile{Data: f.Data}
	}
	site, main := string(byPath["site.auto.hcl"]), string(byPath["main.hcl"])
	if !regexp.MustCompile(`(?m)^media_vm +=  *"services"`).MatchString(site) {
		t.Errorf("site.auto.hcl does not set media_vm:\n%s", site)
	}
	for _, want := range []string{"# TODO: node_ip: the address", "# node_ip = ...", "reserve node_ip for it"} {
		if !strings.Contains(site, want) {
			t.Errorf("site.auto.hcl lacks %q:\n%s", want, site)
		}
	}
	if strings.Contains(site, "services_vm") || strings.Contains(site, "node_address") {
		t.Errorf("site.auto.hcl names the example's variables:\n%s", site)
	}
	for _, want := range []string{
		"  # TODO(migrate init): Stop Samba by hand.\n  step \"incus_exec\" \"halt_samba\" {",
		"  # migrate init left out step incus_instance_state.k3s_stopped:",
		"  # migrate init left out part stop of role \"k3s\" with its steps.\n  # stop = incus_instance_state.k3s_stopped\n",
	} {
		if !strings.Contains(main, want) {
			t.Errorf("main.hcl lacks %q", want)
		}
	}
	ld := runbooks.NewLoader(mfs, runbooks.Options{Dir: "/new", Schemas: schemas(), UnsetVarsUnknown: true,
		Identities: func() ([]age.Identity, error) { return []age.Identity{id}, nil }})
	rb, diags := ld.Load()
	if diags.HasErrors() {
		t.Fatalf("the written runbook does not load: %v", diags.Err())
	}
	if r := rb.Roles["k3s"]; r == nil || r.Parts["stop"] != nil || r.Parts["vm"] == nil {
		t.Errorf("role k3s = %+v, want its vm without its stop step", r)
	}
}
