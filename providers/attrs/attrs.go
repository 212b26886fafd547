package attrs

import (
	"fmt"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
)

// Get returns attribute name of the object (or map) o: null when absent,
// unknown when o itself is unknown.
func Get(o cty.Value, name string) cty.Value {
	if !o.IsKnown() {
		return cty.DynamicVal
	}
	if o.IsNull() {
		return cty.NullVal(cty.DynamicPseudoType)
	}
	ty := o.Type()
	switch {
	case ty.IsObjectType():
		if ty.HasAttribute(name) {
			return o.GetAttr(name)
		}
	case ty.IsMapType():
		if k := cty.StringVal(name); o.HasIndex(k).True() {
			return o.Index(k)
		}
	}
	return cty.NullVal(cty.DynamicPseudoType)
}

// typeError reports an attribute of the wrong type.
func typeError(diags *phases.Diagnostics, what, name, want string, got cty.Type) {
	*diags = append(*diags, phases.Errorf("Incorrect Attribute Type",
		"The %q attribute of %s must be %s, not %s.", name, what, want, got.FriendlyName())...)
}

// Str reads a string (numbers and bools in their text form): def when
// null; known is false when the value is not known yet.
func Str(diags *phases.Diagnostics, what string, v cty.Value, name, def string) (s string, known bool) {
	if !v.IsKnown() {
		return def, false
	}
	if v.IsNull() {
		return def, true
	}
	switch v.Type() {
	case cty.String:
		return v.AsString(), true
	case cty.Number:
		return v.AsBigFloat().Text('f', -1), true
	case cty.Bool:
		return fmt.Sprint(v.True()), true
	}
	typeError(diags, what, name, "a string", v.Type())
	return def, true
}

// Bool reads a bool: def when null.
func Bool(diags *phases.Diagnostics, what string, v cty.Value, name string, def bool) (b bool, known bool) {
	if !v.IsKnown() {
		return def, false
	}
	if v.IsNull() {
		return def, true
	}
	if v.Type() != cty.Bool {
		typeError(diags, what, name, "a bool", v.Type())
		return def, true
	}
	return v.True(), true
}

// Strs reads a list (or set, or tuple) of strings: nil when null; known
// is false when some element is not known yet.
func Strs(diags *phases.Diagnostics, what string, v cty.Value, name string) (list []string, known bool) {
	if !v.IsKnown() {
		return nil, false
	}
	if v.IsNull() {
		return nil, true
	}
	ty := v.Type()
	if !(ty.IsListType() || ty.IsTupleType() || ty.IsSetType()) {
		typeError(diags, what, name, "a list of strings", ty)
		return nil, true
	}
	known = true
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if !e.IsKnown() {
			known = false
			continue
		}
		s, _ := Str(diags, what, e, name, "")
		list = append(list, s)
	}
	return list, known
}

// StrMap reads a map (or object) of strings: nil when null; known is false
// when some element is not known yet.
func StrMap(diags *phases.Diagnostics, what string, v cty.Value, name string) (m map[string]string, known bool) {
	if !v.IsKnown() {
		return nil, false
	}
	if v.IsNull() {
		return nil, true
	}
	ty := v.Type()
	if !(ty.IsMapType() || ty.IsObjectType()) {
		typeError(diags, what, name, "a map of strings", ty)
		return nil, true
	}
	m = map[string]string{}
	known = true
	for it := v.ElementIterator(); it.Next(); {
		k, e := it.Element()
		if !e.IsKnown() {
			known = false
			continue
		}
		s, _ := Str(diags, what, e, name, "")
		m[k.AsString()] = s
	}
	return m, known
}
