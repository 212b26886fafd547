package views

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"

	"github.com/homelab-migrate/migrate/phases"
)

// HCLDiagnostics prints load-time problems with their file, line and a
// snippet of the source, on stderr.
func (v *View) HCLDiagnostics(diags hcl.Diagnostics) {
	if len(diags) == 0 {
		return
	}
	w := hcl.NewDiagnosticTextWriter(v.err, v.files, uint(v.width), v.errColor)
	for _, d := range diags {
		if d.Subject != nil && v.files[d.Subject.Filename] == nil {
			v.plainDiagnostic(d)
			continue
		}
		_ = w.WriteDiagnostic(d)
	}
}

// Diagnostics prints problems found while evaluating, planning or running
// steps. Those that point into a runbook file show its source too.
func (v *View) Diagnostics(diags phases.Diagnostics) {
	v.HCLDiagnostics(ToHCL(diags))
}

// plainDiagnostic prints a diagnostic whose file is not at hand.
func (v *View) plainDiagnostic(d *hcl.Diagnostic) {
	label := v.est.errLabel("Error:")
	if d.Severity == hcl.DiagWarning {
		label = v.est.warn("Warning:")
	}
	fmt.Fprintf(v.err, "%s %s\n\n", label, d.Summary)
	if d.Subject != nil {
		fmt.Fprintf(v.err, "  on %s line %d:\n\n", d.Subject.Filename, d.Subject.Start.Line)
	}
	if d.Detail != "" {
		fmt.Fprintf(v.err, "%s\n", indent(d.Detail, ""))
	}
}

// ToHCL converts engine and provider diagnostics to HCL's, so that one
// writer prints both.
func ToHCL(diags phases.Diagnostics) hcl.Diagnostics {
	out := make(hcl.Diagnostics, 0, len(diags))
	for _, d := range diags {
		hd := &hcl.Diagnostic{Severity: hcl.DiagError, Summary: d.Summary, Detail: d.Detail}
		if d.Severity == phases.Warning {
			hd.Severity = hcl.DiagWarning
		}
		if r := d.Subject; r != nil && r.Filename != "" {
			hd.Subject = &hcl.Range{
				Filename: r.Filename,
				Start:    hcl.Pos{Line: r.StartLine, Column: r.StartCol, Byte: r.StartByte},
				End:      hcl.Pos{Line: r.EndLine, Column: r.EndCol, Byte: r.EndByte},
			}
		}
		out = append(out, hd)
	}
	return out
}
