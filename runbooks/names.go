package runbooks

import (
	"fmt"
	"sort"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"golang.org/x/text/unicode/norm"
)

// Names that look alike must be the same name or an error. "café" typed
// with é (U+00E9) or with e and a combining accent (U+0301) are one name:
// every block label, argument name and reference is normalized to NFC
// right after parsing, so both spellings find each other. "сafe" with a
// Cyrillic с looks like "cafe" but cannot be made the same: validName
// refuses a name whose letters come from more than one script.

// normalizeNames rewrites, in place, the labels, argument names, references
// and for-expression variables of a parsed file to NFC. Strings and object
// keys are values, not names, and stay as written.
func normalizeNames(f *hcl.File) hcl.Diagnostics {
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		return nil
	}
	var diags hcl.Diagnostics
	_ = hclsyntax.VisitAll(body, func(n hclsyntax.Node) hcl.Diagnostics {
		switch n := n.(type) {
		case *hclsyntax.Body:
			diags = append(diags, normalizeAttrs(n)...)
		case *hclsyntax.Block:
			for i, l := range n.Labels {
				n.Labels[i] = norm.NFC.String(l)
			}
		case *hclsyntax.ScopeTraversalExpr:
			normalizeTraversal(n.Traversal)
		case *hclsyntax.RelativeTraversalExpr:
			normalizeTraversal(n.Traversal)
		case *hclsyntax.ForExpr:
			n.KeyVar, n.ValVar = norm.NFC.String(n.KeyVar), norm.NFC.String(n.ValVar)
		}
		return nil
	})
	return diags
}

// normalizeAttrs renames the arguments of a body to NFC; two arguments
// that become one name are reported as HCL reports duplicates.
func normalizeAttrs(b *hclsyntax.Body) hcl.Diagnostics {
	var diags hcl.Diagnostics
	renamed := false
	for name := range b.Attributes {
		if !norm.NFC.IsNormalString(name) {
			renamed = true
			break
		}
	}
	if !renamed {
		return nil
	}
	attrs := make(hclsyntax.Attributes, len(b.Attributes))
	list := make([]*hclsyntax.Attribute, 0, len(b.Attributes))
	for _, a := range b.Attributes {
		list = append(list, a)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].SrcRange.Start.Byte < list[j].SrcRange.Start.Byte })
	for _, a := range list {
		a.Name = norm.NFC.String(a.Name)
		if prev, ok := attrs[a.Name]; ok {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Duplicate Argument",
				Detail: fmt.Sprintf("The argument %q was already set at %s, spelled with other Unicode characters that mean the same. Each argument may be set only once.",
					a.Name, prev.NameRange),
				Subject: a.NameRange.Ptr(),
			})
			continue
		}
		attrs[a.Name] = a
	}
	b.Attributes = attrs
	return diags
}

func normalizeTraversal(tr hcl.Traversal) {
	for i, step := range tr {
		switch s := step.(type) {
		case hcl.TraverseRoot:
			s.Name = norm.NFC.String(s.Name)
			tr[i] = s
		case hcl.TraverseAttr:
			s.Name = norm.NFC.String(s.Name)
			tr[i] = s
		}
	}
}

// mixedScripts returns the first letter of name whose script differs from
// that of the letters before it, with both scripts' names; ok is false
// when every letter is of one script (digits, "_" and "-" have none).
func mixedScripts(name string) (letter rune, first, other string, ok bool) {
	for _, r := range name {
		if !unicode.IsLetter(r) {
			continue
		}
		s := scriptOf(r)
		switch {
		case s == "":
		case first == "":
			first = s
		case s != first:
			return r, first, s, true
		}
	}
	return 0, "", "", false
}

// scriptOf names the Unicode script of a letter; "" for Common and
// Inherited, which go with any script.
func scriptOf(r rune) string {
	if r < utf8.RuneSelf {
		return "Latin"
	}
	for name, table := range unicode.Scripts {
		if unicode.Is(table, r) {
			if name == "Common" || name == "Inherited" {
				return ""
			}
			return name
		}
	}
	return ""
}
