package runbooks_test

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/runbooks"
)

// Errors of expressions over a sensitive value do not quote pieces of it,
// wherever the expression stands: locals, validations, meta-arguments,
// step attributes. The same mistake over a plain value keeps its detail.
func TestSensitiveDiagnosticsHidden(t *testing.T) {
	t.Parallel()
	_, diags := load(t, map[string]string{"main.hcl": `
variable "tok" {
  type      = string
  sensitive = true
  default   = "cnry7Q4zXw9KpL2m"
  validation {
    condition     = tonumber(split("7", var.tok)[1]) > 0
    error_message = "Bad."
  }
}
variable "plain" { default = "abc7def" }

locals {
  n = [for s in split("7", var.tok) : tonumber(s)]
  p = [for s in split("7", var.plain) : tonumber(s)]
}

phase "A" {
  step "exec" "a" {
    command = [for c in split("", var.tok) : format("%x", c)]
    timeout = split("7", var.tok)[0]
  }
}
`}, runbooks.Options{})
	var hidden, shown int
	for _, d := range diags {
		if strings.Contains(d.Detail, "sensitive value") && len(d.Values) > 0 {
			t.Errorf("%s keeps the values of its expression", d.Subject)
		}
		for _, piece := range []string{"cnry", "Q4zXw9KpL2m", "\"c\"", "\"Q\""} {
			if strings.Contains(d.Summary+d.Detail, piece) {
				t.Errorf("%s: %q leaks in %q: %q", d.Subject, piece, d.Summary, d.Detail)
			}
		}
		if strings.Contains(d.Detail, "sensitive value") {
			hidden++
		} else if strings.Contains(d.Detail, `"abc"`) {
			shown++
		}
	}
	// validation, local n, command (once, not per character), timeout
	if hidden != 4 || shown == 0 {
		t.Errorf("want 4 hidden errors and the plain one shown, got %d and %d:\n%s", hidden, shown, listDiags(diags))
	}
}

func listDiags(diags phases.Diagnostics) string {
	var b strings.Builder
	for _, d := range diags {
		if d.Subject != nil {
			b.WriteString(d.Subject.String() + ": ")
		}
		b.WriteString(d.Summary + ": " + d.Detail + "\n")
	}
	return b.String()
}

// A sensitive value given as text that does not parse is not quoted, and
// its text is not kept for snippets.
func TestSensitiveVarTextNotQuoted(t *testing.T) {
	t.Parallel()
	l := runbooks.NewLoader(fstest.MapFS{"main.hcl": {Data: []byte(`
variable "keys" {
  type      = list(string)
  sensitive = true
}
phase "A" {}
`)}}, runbooks.Options{Schemas: testSchemas(), Vars: []string{`keys=["pieceOne", pieceTwo + ]`}})
	_, diags := l.Load()
	if len(diags) != 1 || diags[0].Subject != nil || !strings.Contains(diags[0].Detail, "sensitive variable \"keys\"") {
		t.Fatalf("want one error without a place: %s", listDiags(diags))
	}
	for name, f := range l.Files() {
		if strings.Contains(string(f), "piece") {
			t.Errorf("the secret's text is kept as %s", name)
		}
	}
}
