package runbooks

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"

	"github.com/homelab-migrate/migrate/phases"
)

// scope holds what every expression of a runbook may use: variables,
// locals and functions. It is immutable once loading is done, so
// evaluators may run concurrently.
type scope struct {
	vars      cty.Value // object: var.NAME
	locals    cty.Value // object: local.NAME
	funcs     map[string]function.Function
	stepTypes map[string]stepTypeInfo
	// unknown holds, per step type with declared outputs, the unknown
	// value standing for outputs not known yet.
	unknown map[string]cty.Value
	// inst is the group instance of a group's scope: its variables are
	// computed again when its arguments refer to steps.
	inst *groupInst
}

// evalContext builds the one EvalContext of a runbook expression: var,
// local, the functions, and for each step type T referred to an object
// T = { NAME = outputs of T.NAME }. A step that has no outputs yet is
// unknown (of its output type when the schema declares one), so plans can
// be made before anything ran. refs lists the steps the expression may
// refer to; nil allows none (variables, locals, providers).
//
// A step with for_each is T.NAME = { KEY = outputs of T.NAME["KEY"] },
// and each (each.key, each.value) is the instance being evaluated.
//
// outs are the group outputs the expression refers to: group = { CALL =
// { OUTPUT = value } } (CALL = { KEY = { ... } } for a call with
// for_each).
func (s *scope) evalContext(refs []phases.Address, outs []*groupOutRef, outputs map[phases.Address]cty.Value) *hcl.EvalContext {
	vars := map[string]cty.Value{"var": s.vars, "local": s.locals}
	if s.inst != nil {
		vars["var"], vars["local"] = s.inst.values(outputs)
	}
	if len(outs) > 0 {
		vars["group"] = groupValue(outs, outputs)
	}
	byType := map[string]map[string]cty.Value{}
	instances := map[phases.Address]map[string]cty.Value{}
	for _, a := range refs {
		v, ok := outputs[a]
		if !ok || v.Type() == cty.NilType {
			v = s.unknownOutputs(a.Type)
		}
		m := byType[a.Type]
		if m == nil {
			m = map[string]cty.Value{}
			byType[a.Type] = m
		}
		if a.Key == "" {
			m[a.Name] = v
			continue
		}
		base := a.Base()
		if instances[base] == nil {
			instances[base] = map[string]cty.Value{}
		}
		instances[base][a.Key] = v
	}
	for base, m := range instances {
		byType[base.Type][base.Name] = cty.ObjectVal(m)
	}
	for t, m := range byType {
		vars[t] = cty.ObjectVal(m)
	}
	return &hcl.EvalContext{Variables: vars, Functions: s.funcs}
}

func (s *scope) unknownOutputs(stepType string) cty.Value {
	if v, ok := s.unknown[stepType]; ok {
		return v
	}
	return cty.DynamicVal
}

// evaluator is the phases.Evaluator of a step, check or provider block: it
// decodes the block's attributes against its schema.
type evaluator struct {
	scope     *scope
	body      hcl.Body
	spec      hcldec.Spec
	refs      []phases.Address
	outs      []*groupOutRef // group outputs the block uses
	sensitive []string
	each      cty.Value // each.key and each.value of one for_each instance; NilVal without
}

var _ phases.Evaluator = (*evaluator)(nil)

// Evaluate decodes the block with the given step outputs. Attributes
// declared sensitive carry phases.SensitiveMark.
func (e *evaluator) Evaluate(outputs map[phases.Address]cty.Value) (cty.Value, phases.Diagnostics) {
	v, diags := e.decode(outputs)
	if g := e.scope.inst; g != nil && len(diags) > 0 {
		// A mistake in a group's file is its call's: say which.
		site := g.call.block.DefRange
		for _, d := range diags {
			if d.Subject != nil && d.Subject.Filename != site.Filename {
				d.Detail = strings.TrimSpace(d.Detail + fmt.Sprintf(" (In %s, called at %s:%d.)", g, site.Filename, site.Start.Line))
			}
		}
	}
	return v, convertDiags(diags, false)
}

func (e *evaluator) decode(outputs map[phases.Address]cty.Value) (cty.Value, hcl.Diagnostics) {
	ctx := e.scope.evalContext(e.refs, e.outs, outputs)
	if e.each.Type() != cty.NilType {
		ctx.Variables["each"] = e.each
	}
	v, diags := hcldec.Decode(e.body, e.spec, ctx)
	diags = hideSensitiveBody(diags, ctx, e.body, e.spec)
	return markAttrs(v, e.sensitive), diags
}

// markAttrs marks the named attributes of an object value sensitive.
func markAttrs(v cty.Value, names []string) cty.Value {
	if len(names) == 0 || v.Type() == cty.NilType || !v.Type().IsObjectType() {
		return v
	}
	v, marks := v.Unmark()
	if v.IsNull() || !v.IsKnown() {
		return v.WithMarks(marks)
	}
	m := v.AsValueMap()
	for _, name := range names {
		if a, ok := m[name]; ok {
			m[name] = a.Mark(phases.SensitiveMark)
		}
	}
	return cty.ObjectVal(m).WithMarks(marks)
}

// dropWithin removes diagnostics whose subject lies inside one of the
// given ranges: those are references the loader already reported in its
// own words, which HCL would report again as "Unsupported attribute".
func dropWithin(diags hcl.Diagnostics, bad []hcl.Range) hcl.Diagnostics {
	if len(bad) == 0 {
		return diags
	}
	out := diags[:0:0]
	for _, d := range diags {
		if d.Subject != nil && within(*d.Subject, bad) {
			continue
		}
		out = append(out, d)
	}
	return out
}

func within(r hcl.Range, bad []hcl.Range) bool {
	for _, b := range bad {
		if r.Filename == b.Filename && r.Start.Byte >= b.Start.Byte && r.End.Byte <= b.End.Byte {
			return true
		}
	}
	return false
}
