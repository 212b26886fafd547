package runbooks

import (
	"fmt"
	"sort"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
)

// forEach is a step's for_each: its keys, sorted, and each key's value
// (the key itself for a set of strings). Each key makes one instance,
// TYPE.NAME["KEY"].
type forEach struct {
	keys   []string
	values map[string]cty.Value
}

// decodeForEach reads for_each = MAP or SET OF STRINGS. Its keys name
// instances in the plan and the state, so they must be known at plan:
// made of variables, locals and literals, never of step outputs.
func (ld *load) decodeForEach(a *hcl.Attribute) *forEach {
	bad := func(summary, detail string) *forEach {
		ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: a.Expr.Range().Ptr()})
		return &forEach{values: map[string]cty.Value{}}
	}
	var steps []string
	for _, tr := range a.Expr.Variables() {
		switch root := tr.RootName(); {
		case root == "each":
			return bad("Invalid for_each Argument", "The for_each argument cannot use each: each.key and each.value stand for the instances it makes.")
		case ld.isStepType(root):
			steps = append(steps, root)
		}
	}
	if len(steps) > 0 {
		return bad("Invalid for_each Argument", fmt.Sprintf(
			"The for_each value depends on step outputs that cannot be determined until run (it refers to %s). Its keys name the step's instances in the plan and the state, so they must be known before anything runs: make for_each from variables, locals and literals, and use the step outputs in the block's attributes instead.",
			englishList(steps)))
	}
	before := len(ld.diags)
	v, ok := ld.staticValue(a.Expr, cty.DynamicPseudoType, "for_each")
	if !ok {
		if len(ld.diags) == before {
			return bad("Invalid for_each Argument", "The for_each value is null: give it a map, or a set of strings (toset([...])); an empty one makes no instance.")
		}
		return &forEach{values: map[string]cty.Value{}}
	}
	fe := &forEach{values: map[string]cty.Value{}}
	ty := v.Type()
	switch {
	case ty.IsMapType() || ty.IsObjectType():
		for it := v.ElementIterator(); it.Next(); {
			k, val := it.Element()
			if !fe.add(k.AsString(), val) {
				return bad("Invalid for_each Key", fmt.Sprintf("The for_each keys %q and another are the same text composed differently (Unicode NFC): they would name one instance. Keep one of them.", k.AsString()))
			}
		}
	case ty.IsSetType():
		if !ty.ElementType().Equals(cty.String) && ty.ElementType() != cty.DynamicPseudoType {
			return bad("Invalid for_each Argument", fmt.Sprintf("The for_each value is a set of %s: a set must hold strings, its keys.", ty.ElementType().FriendlyName()))
		}
		for it := v.ElementIterator(); it.Next(); {
			_, val := it.Element()
			if val.IsNull() || !val.Type().Equals(cty.String) {
				return bad("Invalid for_each Argument", "The for_each value is a set that holds something other than a string: a set must hold strings, its keys.")
			}
			if !fe.add(val.AsString(), cty.StringVal(phases.Name(val.AsString()))) {
				return bad("Invalid for_each Key", fmt.Sprintf("The for_each keys %q and another are the same text composed differently (Unicode NFC): they would name one instance. Keep one of them.", val.AsString()))
			}
		}
	case ty.IsListType() || ty.IsTupleType():
		return bad("Invalid for_each Argument", "The for_each value is a list: it must be a map, or a set of strings, so that each instance has a key that does not depend on the order. Write toset([...]) to use the strings of a list as keys.")
	default:
		return bad("Invalid for_each Argument", fmt.Sprintf("The for_each value is a %s: it must be a map, or a set of strings.", ty.FriendlyName()))
	}
	if _, ok := fe.values[""]; ok {
		return bad("Invalid for_each Key", "The for_each value has an empty key: each key names an instance, TYPE.NAME[\"KEY\"], so none may be empty.")
	}
	for k := range fe.values {
		fe.keys = append(fe.keys, k)
	}
	sort.Strings(fe.keys)
	return fe
}

// add adds key k, as the runbook keeps names (NFC, as ParseAddress reads
// it back), with its value; false when another key is the same text.
func (fe *forEach) add(k string, v cty.Value) bool {
	k = phases.Name(k)
	if _, dup := fe.values[k]; dup {
		return false
	}
	fe.values[k] = v
	return true
}

// each is the value of each in the instance of key k.
func (fe *forEach) each(k string) cty.Value {
	return cty.ObjectVal(map[string]cty.Value{"key": cty.StringVal(k), "value": fe.values[k]})
}

func (ld *load) isStepType(name string) bool {
	_, ok := ld.stepTypes[name]
	return ok
}

// keyProblem says why TYPE.NAME["key"] names no instance of d, or "".
func (d *stepDecl) keyProblem(key string) string {
	if d.forEach == nil {
		return fmt.Sprintf("The %s %s has no for_each: refer to it as %s, without a key.", d.kind(), d.addr(), d.addr())
	}
	if _, ok := d.forEach.values[key]; ok {
		return ""
	}
	if len(d.forEach.keys) == 0 {
		return fmt.Sprintf("The %s %s has no instance %q: its for_each is empty.", d.kind(), d.addr(), key)
	}
	return fmt.Sprintf("The %s %s has no instance %q: its for_each keys are %s.", d.kind(), d.addr(), key, quotedList(d.forEach.keys))
}

// checkEach reports each.key and each.value used in a block without
// for_each, and each.OTHER. It returns the ranges it reported.
func (ld *load) checkEach(d *stepDecl, trs []hcl.Traversal) []hcl.Range {
	var bad []hcl.Range
	for _, tr := range trs {
		if tr.RootName() != "each" {
			continue
		}
		var detail string
		name, ok := "", len(tr) > 1
		if ok {
			name, ok = traverserName(tr[1])
		}
		switch {
		case d.forEach == nil:
			detail = fmt.Sprintf("each.key and each.value exist only in a step with for_each; %s has none.", d.addr())
		case !ok || name != "key" && name != "value":
			detail = "each has two attributes: each.key (the instance's key) and each.value (its value in the for_each map; the key again for a set)."
		default:
			continue
		}
		bad = append(bad, tr.SourceRange())
		ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid Reference to each", Detail: detail, Subject: tr.SourceRange().Ptr()})
	}
	return bad
}

// instances returns the steps a declaration makes: itself, or one per
// for_each key, each evaluated with its each.key and each.value.
func (d *stepDecl) instances() []*phases.Step {
	if d.forEach == nil {
		return []*phases.Step{d.step}
	}
	ev, _ := d.step.Config.(*evaluator)
	out := make([]*phases.Step, 0, len(d.forEach.keys))
	for _, k := range d.forEach.keys {
		s := *d.step
		s.Addr.Key = k
		if ev != nil {
			inst := *ev
			inst.each = d.forEach.each(k)
			s.Config = &inst
		}
		out = append(out, &s)
	}
	return out
}

// namedAfterStep reports whether d's object takes the step's name: its
// type has an optional name attribute, and the block sets none.
func (d *stepDecl) namedAfterStep() bool {
	attr, ok := d.info.typ.Attributes["name"]
	if !ok || attr.Required {
		return false
	}
	body, ok := d.block.Body.(*hclsyntax.Body)
	return ok && body.Attributes["name"] == nil
}

// checkInstanceName refuses a for_each step of a type whose object is
// named after the step unless its block says otherwise (an optional
// name: incus_instance, incus_volume, helm_release, kubernetes_namespace)
// when its block sets no name: every instance would manage the one object
// named after the step.
func (ld *load) checkInstanceName(d *stepDecl, forEach *hcl.Attribute) {
	if d.inst != nil || !d.namedAfterStep() {
		return // in a group, checkGroupObjectName says it for every call
	}
	ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Missing Instance Name",
		Detail: fmt.Sprintf("The %s %s has for_each, and a %s is named after its step unless name says otherwise: every instance would manage the one named %q. Set name from the instance, e.g. name = each.key (or \"%s-${each.key}\").",
			d.kind(), d.addr(), d.block.Type, d.block.Name, d.block.Name),
		Subject: forEach.Range.Ptr()})
}
