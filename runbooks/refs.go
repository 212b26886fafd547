package runbooks

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
)

// stepRef is a reference to a step from an expression or depends_on.
// A big runbook has hundreds of thousands, kept until loading ends: hence
// the compact range.
type stepRef struct {
	addr phases.Address // the step block's address, without a key
	key  string         // one instance of a step with for_each; "" for all
	rng  srcRange
	// out is a reference to a group's outputs (addr is then zero); a
	// whole group call or instance in depends_on is an addr with a Group
	// and no Type.
	out *groupOutRef
}

// srcRange is an hcl.Range in 40 bytes instead of 64.
type srcRange struct {
	file       string
	start, end srcPos
}

type srcPos struct{ line, col, byte int32 }

func compact(r hcl.Range) srcRange {
	p := func(p hcl.Pos) srcPos { return srcPos{int32(p.Line), int32(p.Column), int32(p.Byte)} }
	return srcRange{file: r.Filename, start: p(r.Start), end: p(r.End)}
}

func (r srcRange) hcl() hcl.Range {
	p := func(p srcPos) hcl.Pos { return hcl.Pos{Line: int(p.line), Column: int(p.col), Byte: int(p.byte)} }
	return hcl.Range{Filename: r.file, Start: p(r.start), End: p(r.end)}
}

// Ptr is hcl.Range.Ptr, for diagnostics' subjects.
func (r srcRange) Ptr() *hcl.Range { return r.hcl().Ptr() }

// checkRefs checks the references of an expression: var.NAME and
// local.NAME must be declared, and TYPE.NAME[.OUTPUT] must name a declared
// step (and one of its outputs) when steps are allowed. It returns the
// steps referred to, the ranges of the references it reported (so that
// HCL's own complaints about the same spots can be dropped), and its
// diagnostics. Other roots are left to HCL, which reports unknown
// variables with suggestions. what starts the sentence saying steps are
// not allowed ("A local value").
func (ld *load) checkRefs(trs []hcl.Traversal, allowSteps bool, what string) ([]stepRef, []hcl.Range, hcl.Diagnostics) {
	var refs []stepRef
	var bad []hcl.Range
	var diags hcl.Diagnostics
	report := func(tr hcl.Traversal, summary, detail string) {
		rng := tr.SourceRange()
		bad = append(bad, rng)
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: rng.Ptr()})
	}
	for _, tr := range trs {
		root := tr.RootName()
		switch root {
		case "var", "local":
			kind, known := "an input variable", func() []string { return sortedKeys(ld.vars) }
			summary := "Reference to Undeclared Input Variable"
			declare := "variable %q {}"
			if root == "local" {
				kind, known = "a local value", func() []string { return sortedKeys(ld.locals) }
				summary = "Reference to Undeclared Local Value"
				declare = "locals { %s = ... }"
			}
			if len(tr) < 2 {
				report(tr, "Invalid Reference", fmt.Sprintf("A reference to %s must name it, as in %s.NAME.", kind, root))
				continue
			}
			name, ok := traverserName(tr[1])
			if !ok {
				report(tr, "Invalid Reference", fmt.Sprintf("A reference to %s must name it, as in %s.NAME.", kind, root))
				continue
			}
			if root == "var" {
				if _, ok := ld.vars[name]; ok {
					continue
				}
			} else if _, ok := ld.locals[name]; ok {
				continue
			}
			report(tr, summary, fmt.Sprintf("There is no %s named %q.%s Declare it with a "+declare+" block.",
				kind[strings.Index(kind, " ")+1:], name, ld.suggest(name, known), name))
			continue
		}
		if root == "group" {
			if !allowSteps {
				report(tr, "Invalid Reference", fmt.Sprintf("%s cannot refer to groups: its value must be known before any step runs.", what))
				continue
			}
			if r, ok := ld.checkGroupRef(tr, report); ok {
				refs = append(refs, r)
			}
			continue
		}
		info, isStep := ld.stepTypes[root]
		if !isStep {
			continue
		}
		if !allowSteps {
			report(tr, "Invalid Reference", fmt.Sprintf("%s cannot refer to steps such as %s: its value must be known before any step runs.", what, root))
			continue
		}
		if len(tr) < 2 {
			report(tr, "Invalid Reference", fmt.Sprintf("A reference to a step must name it, as in %s.NAME.", root))
			continue
		}
		name, ok := traverserName(tr[1])
		if !ok {
			report(tr, "Invalid Reference", fmt.Sprintf("A reference to a step must name it, as in %s.NAME.", root))
			continue
		}
		addr := ld.local(phases.Address{Type: root, Name: name})
		target, ok := ld.steps[addr]
		if !ok {
			report(tr, "Reference to Undeclared Step", ld.undeclaredStepDetail(addr))
			continue
		}
		if target.forEach != nil && len(tr) > 2 {
			// TYPE.NAME["KEY"][.OUTPUT]: one instance.
			_, isIndex := tr[2].(hcl.TraverseIndex)
			key, ok := traverserName(tr[2])
			key = phases.Name(key)
			if !isIndex || !ok {
				report(tr, "Missing Instance Key", fmt.Sprintf("The step %s has for_each: name one instance, as in %s[\"KEY\"].OUTPUT, or index the map of all its instances with an expression, as in %s[each.key].", addr, addr, addr))
				continue
			}
			if detail := target.keyProblem(key); detail != "" {
				report(tr, "Reference to Undeclared Instance", detail)
				continue
			}
			if len(tr) > 3 {
				out, ok := traverserName(tr[3])
				if ok && !hasOutput(info.typ, out) {
					report(tr, "Reference to Undeclared Output", outputsDetail(addr, out, info.typ))
					continue
				}
			}
			refs = append(refs, stepRef{addr: addr, key: key, rng: compact(tr.SourceRange())})
			continue
		}
		if len(tr) > 2 {
			out, ok := traverserName(tr[2])
			if ok && !hasOutput(info.typ, out) {
				report(tr, "Reference to Undeclared Output", outputsDetail(addr, out, info.typ))
				continue
			}
		}
		refs = append(refs, stepRef{addr: addr, rng: compact(tr.SourceRange())})
	}
	return refs, bad, diags
}

func hasOutput(st phases.StepType, name string) bool {
	_, ok := st.Outputs[name]
	return ok
}

func outputsDetail(addr phases.Address, out string, st phases.StepType) string {
	if len(st.Outputs) == 0 {
		return fmt.Sprintf("The step %s has no output %q: steps of type %s have no outputs. A step can still be referred to as a whole in depends_on.", addr, out, addr.Type)
	}
	names := sortedKeys(st.Outputs)
	return fmt.Sprintf("The step %s has no output %q.%s Steps of type %s have the outputs %s.",
		addr, out, didYouMean(out, names), addr.Type, englishList(names))
}

func (ld *load) undeclaredStepDetail(addr phases.Address) string {
	known := func() []string {
		var known []string
		for a := range ld.steps {
			known = append(known, a.String())
		}
		sort.Strings(known)
		return known
	}
	if ld.cur != nil {
		local := addr.Local()
		return fmt.Sprintf("No step or check %s is declared in group %s: a group's steps refer only to the group's own (%s is %s here). What it needs from the runbook, the call passes as an input.%s",
			local, ld.cur.call.block.Name, local, addr, ld.suggest(addr.String(), known))
	}
	return fmt.Sprintf("No step or check %s is declared in this runbook.%s", addr, ld.suggest(addr.String(), known))
}

// traverserName returns the name a traversal step selects: .name or
// ["name"].
func traverserName(t hcl.Traverser) (string, bool) {
	switch t := t.(type) {
	case hcl.TraverseAttr:
		return t.Name, true
	case hcl.TraverseIndex:
		if t.Key.Type() == cty.String && t.Key.IsKnown() && !t.Key.IsNull() && !t.Key.IsMarked() {
			return t.Key.AsString(), true
		}
	}
	return "", false
}
