package runbooks

import (
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
)

// Diagnostics converts HCL's diagnostics to migrate's one type, keeping
// what a view shows of them: the place, the wider expression around it,
// and the values the expression had (sensitive ones never). This package
// is the boundary where HCL's diagnostics end; Load returns these.
func Diagnostics(diags hcl.Diagnostics) phases.Diagnostics { return convertDiags(diags, true) }

// convertDiags converts diags; with values, it keeps the context range and
// the expression's values too. Evaluations at plan and run time leave
// them out, as they always have: their snippet is the subject alone.
func convertDiags(diags hcl.Diagnostics, values bool) phases.Diagnostics {
	if len(diags) == 0 {
		return nil
	}
	out := make(phases.Diagnostics, 0, len(diags))
	for _, d := range diags {
		pd := phases.Diagnostic{Severity: phases.Error, Summary: d.Summary, Detail: d.Detail}
		if d.Severity == hcl.DiagWarning {
			pd.Severity = phases.Warning
		}
		if d.Subject != nil {
			r := toRange(*d.Subject)
			pd.Subject = &r
			if values && d.Context != nil {
				c := toRange(*d.Context)
				pd.Context = &c
			}
			if values {
				pd.Values = exprValues(d)
			}
		}
		out = append(out, pd)
	}
	return out
}

func toRange(r hcl.Range) phases.Range {
	return phases.Range{
		Filename:  r.Filename,
		StartLine: r.Start.Line, StartCol: r.Start.Column,
		EndLine: r.End.Line, EndCol: r.End.Column,
		StartByte: r.Start.Byte, EndByte: r.End.Byte,
	}
}

// valueWidth is the longest string value a diagnostic quotes.
const valueWidth = 120

// exprValues says which values the expression of d had ("s as 3"), as
// HCL's writer does, for an expression evaluated in several scopes.
// Marked (sensitive) values are never shown.
func exprValues(d *hcl.Diagnostic) []string {
	if d.Expression == nil || d.EvalContext == nil {
		return nil
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
	return stmts
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
// string cut to valueWidth), collections by their size.
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
		if utf8.RuneCountInString(s) > valueWidth {
			s = string([]rune(s)[:valueWidth]) + "…"
		}
		return fmt.Sprintf("%q", s)
	case ty.IsCollectionType() || ty.IsTupleType():
		return fmt.Sprintf("%s with %s", ty.FriendlyName(), countOf(v.LengthInt(), "element"))
	case ty.IsObjectType():
		return fmt.Sprintf("object with %s", countOf(len(ty.AttributeTypes()), "attribute"))
	}
	return ty.FriendlyName()
}

func countOf(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// lineOf is where a block starts, as FILE:LINE, for a detail that points
// at another block than its subject.
func lineOf(r hcl.Range) string {
	return fmt.Sprintf("%s:%d", r.Filename, r.Start.Line)
}
