package runbooks_test

import (
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/runbooks"
)

// "café" composed (U+00E9) and decomposed (e U+0301) is one name: a step
// declared one way is found when referred to the other, and declaring both
// is a duplicate.
func TestNamesNormalizedNFC(t *testing.T) {
	t.Parallel()
	const composed, decomposed = "caf\u00e9", "cafe\u0301"
	rb := mustLoad(t, map[string]string{"main.hcl": `
variable "` + decomposed + `" { default = "x" }
locals { ` + composed + ` = var.` + composed + ` }
phase "` + composed + `" {
  step "exec" "` + decomposed + `" {
    command = [local.` + decomposed + `]
  }
  step "exec" "after" {
    command    = ["true"]
    depends_on = [exec.` + composed + `]
  }
}
phase "two" {
  after = [phase.` + decomposed + `]
}
`}, runbooks.Options{Vars: []string{composed + "=y"}})
	s := step(t, rb, "exec."+composed)
	if got := eval(t, s, nil).GetAttr("command").Index(cty.NumberIntVal(0)).AsString(); got != "y" {
		t.Errorf("command = %q, want the --var value", got)
	}
	if deps := step(t, rb, "exec.after").DependsOn; len(deps) != 1 || deps[0].Name != composed {
		t.Errorf("exec.after depends on %v", deps)
	}
	if rb.Phases[0].Name != composed {
		t.Errorf("phase name %q is not NFC", rb.Phases[0].Name)
	}

	_, diags := load(t, map[string]string{"main.hcl": `
phase "a" {
  step "exec" "` + composed + `" { command = ["true"] }
  step "exec" "` + decomposed + `" { command = ["true"] }
}
`}, runbooks.Options{})
	if len(diags) != 1 || !strings.Contains(diags[0].Summary, "Duplicate") {
		t.Errorf("want one duplicate error, got: %s", diags.Err())
	}
}

// A name mixing scripts is refused: "сafe" with a Cyrillic с is not "cafe".
func TestNamesMixedScripts(t *testing.T) {
	t.Parallel()
	_, diags := load(t, map[string]string{"main.hcl": `
variable "vаr" { default = 1 }
phase "сafe" {
  step "exec" "cafe" { command = ["true"] }
  step "exec" "сafe" { command = ["true"] }
  step "exec" "ελληνικά_2" { command = ["true"] }
  step "exec" "été-1" { command = ["true"] }
}
`}, runbooks.Options{})
	var lines []int
	for _, d := range diags {
		if !strings.HasPrefix(d.Summary, "Mixed Scripts in ") || !strings.Contains(d.Detail, "Cyrillic") || !strings.Contains(d.Detail, "one script") {
			t.Errorf("unexpected %s: %s", d.Summary, d.Detail)
		}
		lines = append(lines, d.Subject.StartLine)
	}
	if len(lines) != 3 || lines[0] != 2 || lines[1] != 3 || lines[2] != 5 {
		t.Errorf("want mixed-script errors on lines 2, 3 and 5, got %v: %s", lines, diags.Err())
	}
}
