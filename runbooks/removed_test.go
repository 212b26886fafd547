package runbooks_test

import (
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/runbooks"
)

const removedRunbook = `phase "platform" {
  step "exec" "boot" { command = ["true"] }
  step "exec" "kept" {
    for_each = toset(["a"])
    command  = ["true", each.key]
  }
  group "app" {
    source   = "./app"
    for_each = toset(["a"])
  }
}
`

const removedGroup = `step "exec" "run" { command = ["true"] }
`

// Removed blocks name a deleted step, an instance, or a group call (all
// its steps, or one instance's), and say whether their records are
// undone.
func TestRemoved(t *testing.T) {
	rb := mustLoad(t, map[string]string{"app/main.hcl": removedGroup, "main.hcl": removedRunbook + `
removed {
  from   = exec.start
  revert = false
}
removed {
  from   = exec.each["x"]
  revert = true
}
removed {
  from   = group.old
  revert = false
}
removed {
  from   = group.app["b"]
  revert = false
}
removed {
  from   = group.app["c"].exec.run
  revert = false
}
`}, runbooks.Options{})
	var got []string
	for _, r := range rb.Removed {
		got = append(got, r.Target())
	}
	if want := `exec.start exec.each["x"] group.old group.app["b"] group.app["c"].exec.run`; strings.Join(got, " ") != want {
		t.Fatalf("removed = %v, want %s", got, want)
	}
	if rb.Removed[0].Revert || !rb.Removed[1].Revert {
		t.Errorf("revert = %v, %v, want false, true", rb.Removed[0].Revert, rb.Removed[1].Revert)
	}
	if r := rb.Removed[0].Range; r.Filename != "main.hcl" || r.StartLine != 13 {
		t.Errorf("range = %v, want main.hcl:13", r)
	}
	for _, tc := range []struct {
		r    int
		a    phases.Address
		want bool
	}{
		{0, phases.Address{Type: "exec", Name: "start"}, true},
		{0, phases.Address{Type: "exec", Name: "start", Key: "k"}, true}, // every instance of a deleted for_each step
		{1, phases.Address{Type: "exec", Name: "each", Key: "y"}, false},
		{1, phases.Address{Type: "exec", Name: "each", Key: "x"}, true},
		{2, phases.Address{Group: "old", GroupKey: "k", Type: "exec", Name: "run"}, true},
		{2, phases.Address{Group: "older", Type: "exec", Name: "run"}, false},
		{3, phases.Address{Group: "app", GroupKey: "b", Type: "exec", Name: "run"}, true},
		{3, phases.Address{Group: "app", GroupKey: "a", Type: "exec", Name: "run"}, false},
	} {
		if got := rb.Removed[tc.r].Matches(tc.a); got != tc.want {
			t.Errorf("%s matches %s: %v, want %v", rb.Removed[tc.r].Target(), tc.a, got, tc.want)
		}
	}
}

// A removed block that cannot be what it says is an error at its line.
func TestRemovedDiagnostics(t *testing.T) {
	for _, tc := range []struct {
		name, removed, summary, line string
		detail                       []string
	}{
		{"a declared step", "removed {\n  from   = exec.boot\n  revert = false\n}", "Removed Step Still Declared", "main.hcl:14",
			[]string{"exec.boot is declared"}},
		{"a declared for_each step", "removed {\n  from   = exec.kept\n  revert = false\n}", "Removed Step Still Declared", "main.hcl:14",
			[]string{"exec.kept is declared"}},
		{"a declared instance", "removed {\n  from   = group.app[\"a\"].exec.run\n  revert = false\n}", "Removed Step Still Declared", "main.hcl:14",
			[]string{`group.app["a"].exec.run is declared`}},
		{"a called group", "removed {\n  from   = group.app\n  revert = false\n}", "Removed Group Call Still Declared", "main.hcl:14",
			[]string{"group.app is called"}},
		{"quoted", "removed {\n  from   = \"exec.start\"\n  revert = false\n}", "Invalid Removed Address", "main.hcl:14",
			[]string{"TYPE.NAME", "without quotes"}},
		{"revert from a variable", "variable \"v\" { default = false }\nremoved {\n  from   = exec.start\n  revert = var.v\n}", "Invalid Removed Block", "main.hcl:16",
			[]string{"true or false"}},
		{"revert missing", "removed {\n  from = exec.start\n}", "Invalid Removed Block", "main.hcl:13",
			[]string{"revert is true or false"}},
		{"twice", "removed {\n  from   = exec.start\n  revert = false\n}\nremoved {\n  from   = exec.start\n  revert = true\n}", "Duplicate Removed Block", "main.hcl:18",
			[]string{"exec.start is named already by the removed block at main.hcl:13"}},
		{"also moved", "moved {\n  from = exec.start\n  to   = exec.boot\n}\nremoved {\n  from   = exec.start\n  revert = false\n}", "Removed and Moved", "main.hcl:18",
			[]string{"carried or let go, not both"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := load(t, map[string]string{"app/main.hcl": removedGroup, "main.hcl": removedRunbook + "\n" + tc.removed + "\n"}, runbooks.Options{})
			expectDiag(t, diags, tc.summary, tc.line, tc.detail...)
		})
	}
}

// A group's files hold no removed block: it belongs to the runbook.
func TestRemovedNotInAGroup(t *testing.T) {
	_, diags := load(t, map[string]string{"app/main.hcl": removedGroup + "removed {\n  from   = exec.x\n  revert = false\n}\n", "main.hcl": removedRunbook}, runbooks.Options{})
	if err := diags.Err(); err == nil || !strings.Contains(err.Error(), "not removed blocks") {
		t.Fatalf("diagnostics %v, want a removed block refused in a group", err)
	}
}
