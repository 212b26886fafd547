package views

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	wordwrap "github.com/mitchellh/go-wordwrap"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/secret"
)

// snippetWidth is the widest piece of a source line a diagnostic quotes:
// longer lines are cut around the place the diagnostic points at.
const snippetWidth = 120

// Diagnostics prints problems, from loading a runbook to running its
// steps, on stderr: those that point into a runbook file with the line
// and a snippet of the source. The text is written as HCL's own writer
// would, but each line is found through an index (HCL's scans the file
// from the start for every diagnostic, so N errors cost N times the file),
// long lines are cut, and everything passes the scrubber.
func (v *View) Diagnostics(diags phases.Diagnostics) {
	if len(diags) == 0 {
		return
	}
	var b strings.Builder
	for _, d := range diags {
		if d.Subject != nil && d.Subject.Filename == "" {
			d.Subject = nil // a place in no file says nothing
		}
		// A guest's or a command's output quoted in an error is text,
		// never escapes the terminal would obey.
		d.Summary, d.Detail = secret.Visible(d.Summary), secret.Visible(d.Detail)
		b.Reset()
		if d.Subject != nil && v.files[d.Subject.Filename] == nil {
			v.plainDiagnostic(&b, &d)
		} else {
			v.writeDiagnostic(&b, &d)
		}
		io.WriteString(v.err, v.scrubText(b.String()))
	}
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
func (v *View) plainDiagnostic(w io.Writer, d *phases.Diagnostic) {
	label := v.est.errLabel("Error:")
	if d.Severity == phases.Warning {
		label = v.est.warn("Warning:")
	}
	fmt.Fprintf(w, "%s %s\n\n", label, d.Summary)
	if d.Subject != nil {
		fmt.Fprintf(w, "  on %s line %d:\n\n", d.Subject.Filename, d.Subject.StartLine)
	}
	if d.Detail != "" {
		fmt.Fprintf(w, "%s\n", indent(d.Detail, ""))
	}
}

// writeDiagnostic writes d in the layout of hcl.NewDiagnosticTextWriter.
func (v *View) writeDiagnostic(w *strings.Builder, d *phases.Diagnostic) {
	var color, highlight, reset string
	if v.errColor {
		color, highlight, reset = "\x1b[31m", "\x1b[1;4m", "\x1b[0m"
	}
	severity := "Error"
	if d.Severity == phases.Warning {
		severity = "Warning"
		if v.errColor {
			color = "\x1b[33m"
		}
	}
	fmt.Fprintf(w, "%s%s%s: %s\n\n", color, severity, reset, d.Summary)
	if d.Subject != nil {
		snip, hl := *d.Subject, *d.Subject
		if d.Context != nil {
			snip = rangeOver(snip, *d.Context)
		}
		if hl.StartByte == hl.EndByte { // show an empty range as one character
			hl.EndByte++
		}
		src := v.files[d.Subject.Filename]
		starts := v.lineStarts(d.Subject.Filename, src)
		fmt.Fprintf(w, "  on %s line %d:\n", d.Subject.Filename, d.Subject.StartLine)
		for line := max(snip.StartLine, 1); line <= min(snip.EndLine, len(starts)); line++ {
			a, b := starts[line-1], len(src)
			if line < len(starts) {
				b = starts[line] - 1
			}
			text := bytes.TrimSuffix(src[a:b], []byte{'\r'})
			hs := min(max(hl.StartByte-a, 0), len(text))
			he := min(max(hl.EndByte-a, hs), len(text))
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

// rangeOver is the smallest range that covers a and b, as
// hcl.RangeOver.
func rangeOver(a, b phases.Range) phases.Range {
	r := a
	if b.StartByte < a.StartByte {
		r.StartLine, r.StartCol, r.StartByte = b.StartLine, b.StartCol, b.StartByte
	}
	if b.EndByte > a.EndByte {
		r.EndLine, r.EndCol, r.EndByte = b.EndLine, b.EndCol, b.EndByte
	}
	return r
}

// writeValues says which values the expression of d had ("with s as
// 3."), as HCL's writer does.
func writeValues(w *strings.Builder, d *phases.Diagnostic) {
	for i, s := range d.Values {
		if i == 0 {
			w.WriteString("with ")
		} else {
			w.WriteString("     ")
		}
		w.WriteString(s)
		if i == len(d.Values)-1 {
			w.WriteString(".\n\n")
		} else {
			w.WriteString(",\n")
		}
	}
}
