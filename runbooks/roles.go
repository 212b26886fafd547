package runbooks

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/homelab-migrate/migrate/phases"
)

// roleBlock is role "NAME" { PART = REF | [REF, ...] }.
type roleBlock struct {
	Name      string    `hcl:"name,label"`
	NameRange hcl.Range `hcl:"name,label_range"`
	Body      hcl.Body  `hcl:",remain"`
	DefRange  hcl.Range `hcl:",def_range"`
}

// declareRoles checks the role blocks: each name once, each part a
// reference or a list of them, each reference a declared step or check
// (TYPE.NAME), variable (var.NAME) or phase (phase.NAME). A role changes
// nothing the engine does: it says what the runbook's parts stand for, to
// programs that read the runbook (migrate init's template).
func (ld *load) declareRoles(blocks []*roleBlock) map[string]*phases.Role {
	if len(blocks) == 0 {
		return nil
	}
	roles := map[string]*phases.Role{}
	for _, b := range blocks {
		if first, ok := roles[b.Name]; ok {
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Duplicate Role",
				Detail:   fmt.Sprintf("A role named %q is declared already, at %s. Each role is declared once.", b.Name, first.Range),
				Subject:  b.NameRange.Ptr(),
			})
			continue
		}
		role := &phases.Role{Name: b.Name, Parts: map[string]*phases.RolePart{}, Range: toRange(b.DefRange)}
		roles[b.Name] = role
		attrs, diags := b.Body.JustAttributes()
		ld.diags = append(ld.diags, diags...)
		for _, name := range sortedKeys(attrs) {
			a := attrs[name]
			part := &phases.RolePart{Name: name, Range: toRange(a.Range)}
			role.Parts[name] = part
			exprs := []hcl.Expression{a.Expr}
			if list, diags := hcl.ExprList(a.Expr); !diags.HasErrors() {
				exprs = list
			}
			for _, e := range exprs {
				if ref, ok := ld.roleRef(b.Name, name, e); ok {
					part.Refs = append(part.Refs, ref)
				}
			}
		}
	}
	return roles
}

// roleRef checks one reference of a role's part.
func (ld *load) roleRef(role, part string, e hcl.Expression) (phases.RoleRef, bool) {
	fail := func(summary, detail string) (phases.RoleRef, bool) {
		ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: e.Range().Ptr()})
		return phases.RoleRef{}, false
	}
	where := fmt.Sprintf("Part %s of role %q", part, role)
	tr, diags := hcl.AbsTraversalForExpr(e)
	name := ""
	if !diags.HasErrors() && len(tr) == 2 {
		name, _ = traverserName(tr[1])
	}
	root := ""
	if !diags.HasErrors() && len(tr) > 0 {
		root = tr.RootName()
	}
	ref := phases.RoleRef{Name: name, Range: toRange(e.Range())}
	switch {
	case diags.HasErrors() || (name == "" && root != "group"):
		return fail("Invalid Role Reference", where+" must name a step or check as TYPE.NAME (group.CALL.TYPE.NAME in a group), a variable as var.NAME or a phase as phase.NAME, or a list of them, without quotes.")
	case root == "var":
		ref.Kind = phases.RefVar
		if _, ok := ld.vars[name]; !ok {
			return fail("Role Names an Undeclared Variable", fmt.Sprintf("%s names var.%s, but no variable %q is declared.%s", where, name, name, ld.suggest(name, func() []string { return sortedKeys(ld.vars) })))
		}
	case root == "phase":
		ref.Kind = phases.RefPhase
		if _, ok := ld.phaseIdx[name]; !ok {
			return fail("Role Names an Undeclared Phase", fmt.Sprintf("%s names phase.%s, but no phase %q is declared.%s", where, name, name, ld.suggest(name, func() []string { return sortedKeys(ld.phaseIdx) })))
		}
	default:
		d, ok := ld.namedStep("Role", where, e)
		if !ok {
			return phases.RoleRef{}, false
		}
		ref.Kind, ref.Step, ref.Name = phases.RefStep, d.addr(), d.addr().String()
	}
	return ref, true
}

// namedStep is the step or check a block of kind (Role, Service) names,
// as TYPE.NAME or as group.CALL.TYPE.NAME (group.CALL["KEY"].TYPE.NAME
// for a call with for_each: one step of one instance; a step's own
// for_each key is not named, as TYPE.NAME does not name one outside
// groups). where says whose reference it is, for the errors.
func (ld *load) namedStep(kind, where string, e hcl.Expression) (*stepDecl, bool) {
	fail := func(summary, detail string) (*stepDecl, bool) {
		ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: e.Range().Ptr()})
		return nil, false
	}
	tr, diags := hcl.AbsTraversalForExpr(e)
	var a phases.Address
	switch {
	case !diags.HasErrors() && tr.RootName() == "group":
		r, ok := ld.groupStepRef(kind, tr, e.Range())
		if !ok {
			return nil, false
		}
		if r.addr.Type == "" || r.key != "" {
			return fail("Invalid "+kind+" Reference", where+" names a group: a "+strings.ToLower(kind)+" names one step of it, as group.CALL.TYPE.NAME (group.CALL[\"KEY\"].TYPE.NAME for a call with for_each).")
		}
		a = r.addr
	case !diags.HasErrors() && len(tr) == 2:
		name, ok := traverserName(tr[1])
		if !ok {
			return fail("Invalid "+kind+" Reference", where+" must name a step or check as TYPE.NAME (group.CALL.TYPE.NAME in a group), without quotes.")
		}
		a = phases.Address{Type: tr.RootName(), Name: name}
	default:
		return fail("Invalid "+kind+" Reference", where+" must name a step or check as TYPE.NAME (group.CALL.TYPE.NAME in a group), without quotes.")
	}
	d, ok := ld.steps[a]
	if !ok || d.dup {
		return fail(kind+" Names an Undeclared Step", fmt.Sprintf("%s names %s, but no step or check %s is declared in this runbook.%s", where, a, a, ld.suggest(a.String(), ld.stepNames)))
	}
	return d, true
}
