package runbooks_test

import (
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/runbooks"
)

const movedRunbook = `phase "platform" {
  step "exec" "boot" { command = ["true"] }
  step "exec" "answers" { command = ["true"] }
}
`

// A moved block carries a renamed step's record: the runbook holds the
// moves in the order written, chains included.
func TestMoved(t *testing.T) {
	rb := mustLoad(t, map[string]string{"main.hcl": movedRunbook + `
moved {
  from = exec.start
  to   = exec.boot
}
moved {
  from = exec.first
  to   = exec.second
}
moved {
  from = exec.second
  to   = exec.answers
}
`}, runbooks.Options{})
	var got []string
	for _, m := range rb.Moved {
		got = append(got, m.From.String()+"->"+m.To.String())
	}
	if want := "exec.start->exec.boot exec.first->exec.second exec.second->exec.answers"; strings.Join(got, " ") != want {
		t.Fatalf("moved = %v, want %s", got, want)
	}
	if r := rb.Moved[0].Range; r.Filename != "main.hcl" || r.StartLine != 6 {
		t.Errorf("range = %v, want main.hcl:6", r)
	}
	if rb.Moved[0].To != (phases.Address{Type: "exec", Name: "boot"}) {
		t.Errorf("to = %#v", rb.Moved[0].To)
	}
}

// A moved block that cannot be followed is an error at its line.
func TestMovedDiagnostics(t *testing.T) {
	for _, tc := range []struct {
		name, moved, summary, line string
		detail                     []string
	}{
		{"from a declared step", "moved {\n  from = exec.answers\n  to   = exec.boot\n}", "Moved From a Declared Step", "main.hcl:7",
			[]string{"exec.answers is declared"}},
		{"to nothing", "moved {\n  from = exec.start\n  to   = exec.bot\n}", "Moved To an Undeclared Step", "main.hcl:6",
			[]string{"exec.bot", `Did you mean "exec.boot"?`}},
		{"quoted", "moved {\n  from = \"exec.start\"\n  to   = exec.boot\n}", "Invalid Moved Address", "main.hcl:7",
			[]string{"TYPE.NAME, without quotes"}},
		{"twice from one address", "moved {\n  from = exec.start\n  to   = exec.boot\n}\nmoved {\n  from = exec.start\n  to   = exec.answers\n}", "Duplicate Move", "main.hcl:11",
			[]string{"exec.start is moved already, to exec.boot at main.hcl:6"}},
		{"cycle", "moved {\n  from = exec.a\n  to   = exec.b\n}\nmoved {\n  from = exec.b\n  to   = exec.a\n}", "Cyclic Moves", "main.hcl:6",
			[]string{"exec.a back to itself"}},
		{"chain out of order", "moved {\n  from = exec.b\n  to   = exec.boot\n}\nmoved {\n  from = exec.a\n  to   = exec.b\n}", "Moves Out of Order", "main.hcl:10",
			[]string{"in the order they happened"}},
		{"to itself", "moved {\n  from = exec.x\n  to   = exec.x\n}", "Invalid Move", "main.hcl:8",
			[]string{"to itself"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := load(t, map[string]string{"main.hcl": movedRunbook + "\n" + tc.moved + "\n"}, runbooks.Options{})
			expectDiag(t, diags, tc.summary, tc.line, tc.detail...)
		})
	}
}

// A record moves into or out of a for_each instance: the instance is a
// declared address, a key the map lacks or the step's address without a
// key is not.
func TestMovedIntoAnInstance(t *testing.T) {
	const fe = `phase "p" {
  step "exec" "app" {
    for_each = toset(["a", "b"])
    command  = ["echo", each.key]
  }
  step "exec" "one" { command = ["true"] }
}
`
	rb := mustLoad(t, map[string]string{"main.hcl": fe + `
moved {
  from = exec.a
  to   = exec.app["a"]
}
moved {
  from = exec.app["c"]
  to   = exec.one
}
`}, runbooks.Options{})
	if len(rb.Moved) != 2 || rb.Moved[0].To != (phases.Address{Type: "exec", Name: "app", Key: "a"}) {
		t.Fatalf("moved = %+v", rb.Moved)
	}
	for _, to := range []string{`exec.app["z"]`, `exec.app`, `exec.one["a"]`} {
		_, diags := load(t, map[string]string{"main.hcl": fe + "moved {\n  from = exec.a\n  to   = " + to + "\n}\n"}, runbooks.Options{})
		if !diags.HasErrors() || !strings.Contains(diags.Err().Error(), "Moved To an Undeclared Step") {
			t.Errorf("moved to %s: %v, want Moved To an Undeclared Step", to, diags.Err())
		}
	}
}
