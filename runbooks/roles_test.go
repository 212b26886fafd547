package runbooks_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/runbooks"
)

const rolesRunbook = `
variable "old_vm" {
  type    = string
  default = "services"
}
phase "platform" {
  step "exec" "boot" { command = ["true"] }
}
phase "data-apps" {
  step "exec" "stop_old" { command = ["true"] }
  step "exec" "answers" { command = ["true"] }
}
`

// A role block names steps, checks, variables and phases; the runbook
// holds each part's references in the order written.
func TestRoles(t *testing.T) {
	rb := mustLoad(t, map[string]string{"main.hcl": rolesRunbook + `
role "services" {
  vm     = var.old_vm
  stop   = exec.stop_old
  steps  = [exec.boot, exec.answers]
  phase  = phase.data-apps
}
role "empty" {}
`}, runbooks.Options{})
	if len(rb.Roles) != 2 || rb.Roles["empty"] == nil {
		t.Fatalf("roles = %v, want services and empty", rb.Roles)
	}
	r := rb.Roles["services"]
	got := map[string]string{}
	for name, p := range r.Parts {
		var refs []string
		for _, ref := range p.Refs {
			refs = append(refs, ref.Kind+":"+ref.String())
		}
		got[name] = strings.Join(refs, " ")
	}
	want := map[string]string{"vm": "var:var.old_vm", "stop": "step:exec.stop_old", "steps": "step:exec.boot step:exec.answers", "phase": "phase:phase.data-apps"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("part %s = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("parts = %v, want %v", got, want)
	}
	if s := r.Parts["stop"].Refs[0]; s.Step != (phases.Address{Type: "exec", Name: "stop_old"}) || s.Range.StartLine != 16 {
		t.Errorf("stop = %+v, want exec.stop_old at line 16", s)
	}
	if r.Range.Filename != "main.hcl" || r.Range.StartLine != 14 {
		t.Errorf("role range = %v, want main.hcl:14", r.Range)
	}
}

// A role that names what the runbook does not declare is an error at the
// reference, with the name it likely meant.
func TestRoleNamesWhatIsGone(t *testing.T) {
	for _, tc := range []struct {
		name, role, summary, line string
		detail                    []string
	}{
		{"step", `role "services" { stop = exec.stop_olds }`, "Role Names an Undeclared Step", "main.hcl:13",
			[]string{`role "services"`, "exec.stop_olds", `Did you mean "exec.stop_old"?`}},
		{"step in a list", "role \"services\" {\n  steps = [exec.boot, exec.bot]\n}", "Role Names an Undeclared Step", "main.hcl:14",
			[]string{"Part steps", "exec.bot", `Did you mean "exec.boot"?`}},
		{"variable", `role "services" { vm = var.old_vms }`, "Role Names an Undeclared Variable", "main.hcl:13",
			[]string{"var.old_vms", `Did you mean "old_vm"?`}},
		{"phase", `role "services" { phase = phase.data-app }`, "Role Names an Undeclared Phase", "main.hcl:13",
			[]string{"phase.data-app", `Did you mean "data-apps"?`}},
		{"not a reference", `role "services" { vm = "services" }`, "Invalid Role Reference", "main.hcl:13",
			[]string{"TYPE.NAME", "var.NAME", "phase.NAME"}},
		{"twice", "role \"services\" {}\nrole \"services\" {}", "Duplicate Role", "main.hcl:14",
			[]string{"main.hcl:13"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := load(t, map[string]string{"main.hcl": rolesRunbook + tc.role + "\n"}, runbooks.Options{})
			expectDiag(t, diags, tc.summary, tc.line, tc.detail...)
		})
	}
}

// A role names a step of a group call as group.CALL.TYPE.NAME, and of one
// instance of a call with for_each as group.CALL["KEY"].TYPE.NAME; a
// whole group, or a step the group does not have, is an error at the
// reference.
func TestRoleNamesGroupSteps(t *testing.T) {
	files := func(role string) map[string]string {
		fs := map[string]string{}
		for k, v := range groupFiles {
			fs[k] = v
		}
		fs["main.hcl"] += role
		return fs
	}
	rb := mustLoad(t, files(`
role "apps" {
  stop  = group.single.exec.stop
  steps = [group.app["jellyfin"].exec.stop, exec.prepare]
}
`), runbooks.Options{})
	r := rb.Roles["apps"]
	if s := r.Parts["stop"].Refs[0]; s.Kind != phases.RefStep || s.Step != (phases.Address{Group: "single", Type: "exec", Name: "stop"}) || s.Name != "group.single.exec.stop" {
		t.Errorf("stop = %+v, want group.single.exec.stop", s)
	}
	var got []string
	for _, ref := range r.Parts["steps"].Refs {
		got = append(got, ref.String())
	}
	if want := []string{`group.app["jellyfin"].exec.stop`, "exec.prepare"}; !slices.Equal(got, want) {
		t.Errorf("steps = %q, want %q", got, want)
	}
	for _, tc := range []struct{ role, summary, detail string }{
		{`role "apps" { stop = group.single }`, "Invalid Role Reference", "a role names one step of it"},
		{`role "apps" { stop = group.single.exec.stopp }`, "Role Names an Undeclared Step", `Did you mean "group.single.exec.stop"?`},
		{`role "apps" { stop = group.app.exec.stop }`, "Role Names an Undeclared Step", "group.app.exec.stop"},
	} {
		_, diags := load(t, files(tc.role+"\n"), runbooks.Options{})
		found := false
		for _, d := range diags {
			found = found || d.Summary == tc.summary && strings.Contains(d.Detail, tc.detail) && d.Subject != nil && d.Subject.Filename == "main.hcl"
		}
		if !found {
			t.Errorf("%s: no %q saying %q among %v", tc.role, tc.summary, tc.detail, diags.Err())
		}
	}
}
