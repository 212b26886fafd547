package runbooks_test

import (
	"slices"
	"testing"

	"github.com/homelab-migrate/migrate/runbooks"
)

// The loader's diagnostics are migrate's own type and keep what a view
// shows of HCL's: the place, and the values the expression had.
func TestDiagnosticsKeepPlaceAndValues(t *testing.T) {
	t.Parallel()
	_, diags := load(t, map[string]string{"main.hcl": `variable "n" { default = "abc" }
locals { x = tonumber(var.n) }
phase "A" {}
`}, runbooks.Options{})
	if len(diags) != 1 {
		t.Fatalf("want one diagnostic, got %d: %v", len(diags), diags.Err())
	}
	d := diags[0]
	if d.Subject == nil || d.Subject.Filename != "main.hcl" || d.Subject.StartLine != 2 {
		t.Errorf("subject %v, want main.hcl line 2", d.Subject)
	}
	if !slices.Contains(d.Values, `var.n as "abc"`) {
		t.Errorf("values %q lack var.n", d.Values)
	}
}
