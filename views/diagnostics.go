package views

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	wordwrap "github.com/mitchellh/go-wordwrap"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
)

// snippetWidth is the widest piece of a source line a diagnostic quotes:
// longer lines are cut around the place the diagnostic points at.
const snippetWidth = 120

// HCLDiagnostics prints load-time problems with their file, line and a
// snippet of the source, on stderr. The text is written as HCL's own
// writer would, but each line is found through an index (HCL's scans the
// file from the start for every diagnostic, so N errors cost N times the
// file), long lines are cut, and everything passes the scrubber.
func (v *View) HCLDiagnostics(diags hcl.Diagnostics) {
	if len(diags) == 0 {
		return
	}
	var b strings.Builder
	for _, d := range diags {
		b.Reset()
		if d.Subject != nil && v.files[d.Subject.Filename] == nil {
			v.plainDiagnostic(&b, d)
		} else {
			v.writeDiagnostic(&b, d)
		}
		io.WriteString(v.err, v.scrubText(b.String()))
	}
}

// Diagnostics prints problems found while evaluating, planning or running
// steps. Those that point into a runbook file show its source too.
func (v *View) Diagnostics(diags phases.Diagnostics) {
	v.HCLDiagnostics(ToHCL(diags))
}

// SetScrubber makes every diagnostic and error pass through scrub (the
// redaction of the runbook's secrets) before it is written.
func (v *View) SetScrubber(scrub func(string) string) { v.scrub = scrub }

func (v *View) scrubText(s string) string {
	if v.scrub == nil {
		return s
	}
	return v.scrub(s)
}

// plainDiagnostic prints a diagnostic whose file is not at hand.
func (v *View) plainDiagnostic(w io.Writer, d *hcl.Diagnostic) {
	label := v.est.errLabel("Error:")
	if d.Severity == hcl.DiagWarning {
		label = v.est.warn("Warning:")
	}
	fmt.Fprintf(w, "%s %s\n\n", label, d.Summary)
	if d.Subject != nil {
		fmt.Fprintf(w, "  on %s line %d:\n\n", d.Subject.Filename, d.Subject.Start.Line)
	}
	if d.Detail != "" {
		fmt.Fprintf(w, "%s\n", indent(d.Detail, ""))
	}
}

// writeDiagnostic writes d in the layout of hcl.NewDiagnosticTextWriter.
func (v *View) writeDiagnostic(w *strings.Builder, d *hcl.Diagnostic) {
	var color, highlight, reset string
	if v.errColor {
		color, highlight, reset = "\x1b[31m", "\x1b[1;4m", "\x1b[0m"
	}
	severity := "Error"
	if d.Severity == hcl.DiagWarning {
		severity = "Warning"
		if v.errColor {
			color = "\x1b[33m"
		}
	}
	fmt.Fprintf(w, "%s%s%s: %s\n\n", color, severity, reset, d.Summary)
	if d.Subject != nil {
		snip, hl := *d.Subject, *d.Subject
		if d.Context != nil {
			snip = hcl.RangeOver(snip, *d.Context)
		}
		if hl.Empty() { // show an empty range as one character
			hl.End.Byte++
		}
		src := v.files[d.Subject.Filename].Bytes
		starts := v.lineStarts(d.Subject.Filename, src)
		fmt.Fprintf(w, "  on %s line %d:\n", d.Subject.Filename, d.Subject.Start.Line)
		for line := max(snip.Start.Line, 1); line <= min(snip.End.Line, len(starts)); line++ {
			a, b := starts[line-1], len(src)
			if line < len(starts) {
				b = starts[line] - 1
			}
			text := bytes.TrimSuffix(src[a:b], []byte{'\r'})
			hs := min(max(hl.Start.Byte-a, 0), len(text))
			he := min(max(hl.End.Byte-a, hs), len(text))
			pre, mid, post := cutLine(text, hs, he)
			pre, mid, post = printable(pre), printable(mid), printable(post)
			if mid == "" {
				fmt.Fprintf(w, "%4d: %s%s\n", line, pre, post)
			} else {
				fmt.Fprintf(w, "%4d: %s%s%s%s%s\n", line, pre, highlight, mid, reset, post)
			}
		}
		w.WriteByte('\n')
		writeValues(w, d)
	}
	if d.Detail != "" {
		detail := d.Detail
		if v.width > 0 {
			detail = wordwrap.WrapString(detail, uint(v.width))
		}
		fmt.Fprintf(w, "%s\n\n", detail)
	}
}

// lineStarts indexes the lines of a file once, so that finding the line
// of a diagnostic does not cost a scan of the file.
func (v *View) lineStarts(name string, src []byte) []int {
	if s, ok := v.lines[name]; ok {
		return s
	}
	s := []int{0}
	for i, c := range src {
		if c == '\n' {
			s = append(s, i+1)
		}
	}
	if v.lines == nil {
		v.lines = map[string][]int{}
	}
	v.lines[name] = s
	return s
}

// cutLine splits a source line around its highlighted bytes [hs, he) and,
// when it is wider than snippetWidth runes, keeps a window around the
// start of the highlight, with an ellipsis where it was cut.
func cutLine(text []byte, hs, he int) (pre, mid, post string) {
	if utf8.RuneCount(text) <= snippetWidth {
		return string(text[:hs]), string(text[hs:he]), string(text[he:])
	}
	// Runes before the highlight: a third of the width at most.
	a := hs
	for n := 0; a > 0 && n < snippetWidth/3; n++ {
		_, size := utf8.DecodeLastRune(text[:a])
		a -= size
	}
	b := a
	for n := 0; b < len(text) && n < snippetWidth; n++ {
		_, size := utf8.DecodeRune(text[b:])
		b += size
	}
	hs, he = max(hs, a), min(max(he, hs), b)
	if he < hs {
		he = hs
	}
	pre, mid, post = string(text[a:hs]), string(text[hs:he]), string(text[he:b])
	if a > 0 {
		pre = "…" + pre
	}
	if b < len(text) {
		post += "…"
	}
	return pre, mid, post
}

// printable replaces control characters of a source line (an escape
// sequence would drive the terminal) by U+FFFD; tabs stay.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if (r < 0x20 && r != '\t') || r == 0x7f {
			return utf8.RuneError
		}
		return r
	}, s)
}

// writeValues says which values the expression of d had ("with s as
// 3."), as HCL's writer does, for an expression evaluated in several
// scopes. Marked (sensitive) values are never shown.
func writeValues(w *strings.Builder, d *hcl.Diagnostic) {
	if d.Expression == nil || d.EvalContext == nil {
		return
	}
	var stmts []string
	seen := map[string]bool{}
	for _, tr := range d.Expression.Variables() {
		val, diags := tr.TraverseAbs(d.EvalContext)
		name := traversalStr(tr)
		if diags.HasErrors() || seen[name] || !val.IsKnown() || val.ContainsMarked() {
			continue
		}
		seen[name] = true
		if val.IsNull() {
			stmts = append(stmts, name+" set to null")
		} else {
			stmts = append(stmts, name+" as "+valueStr(val))
		}
	}
	sort.Strings(stmts)
	for i, s := range stmts {
		if i == 0 {
			w.WriteString("with ")
		} else {
			w.WriteString("     ")
		}
		w.WriteString(s)
		if i == len(stmts)-1 {
			w.WriteString(".\n\n")
		} else {
			w.WriteString(",\n")
		}
	}
}

func traversalStr(tr hcl.Traversal) string {
	var b strings.Builder
	for _, step := range tr {
		switch s := step.(type) {
		case hcl.TraverseRoot:
			b.WriteString(s.Name)
		case hcl.TraverseAttr:
			b.WriteString("." + s.Name)
		case hcl.TraverseIndex:
			if s.Key.Type().IsPrimitiveType() && !s.Key.IsMarked() {
				b.WriteString("[" + valueStr(s.Key) + "]")
			} else {
				b.WriteString("[...]")
			}
		}
	}
	return b.String()
}

// valueStr is a short description of a value: primitives in full (a
// string cut to the snippet width), collections by their size.
func valueStr(v cty.Value) string {
	ty := v.Type()
	switch {
	case v.IsNull():
		return "null"
	case !v.IsKnown():
		return "(not yet known)"
	case ty == cty.Bool:
		return fmt.Sprint(v.True())
	case ty == cty.Number:
		return v.AsBigFloat().Text('g', 10)
	case ty == cty.String:
		s := v.AsString()
		if utf8.RuneCountInString(s) > snippetWidth {
			s = string([]rune(s)[:snippetWidth]) + "…"
		}
		return fmt.Sprintf("%q", s)
	case ty.IsCollectionType() || ty.IsTupleType():
		return fmt.Sprintf("%s with %s", ty.FriendlyName(), plural(v.LengthInt(), "element", "elements"))
	case ty.IsObjectType():
		return fmt.Sprintf("object with %s", plural(len(ty.AttributeTypes()), "attribute", "attributes"))
	}
	return ty.FriendlyName()
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
