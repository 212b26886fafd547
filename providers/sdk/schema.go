package sdk

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
)

// The tags an attributes struct may carry on a field:
//
//	cty:"name"        the attribute's name (a field without it is ignored)
//	required:"true"   the attribute must be set
//	sensitive:"true"  the whole value is a secret (redacted, scrubbed)
//	doc:"..."         its description
//	optional:"true"   (in a nested struct) the object's attribute may be
//	                  left out, and is then null
//
// Field types: string, bool, int/int64/float64 (and pointers to them,
// nil when null), []string, map[string]string, nested structs (objects),
// slices and maps of those, and cty.Value (any type).

var ctyValueType = reflect.TypeOf(cty.Value{})

// Attributes derives the attributes of a block from a struct value or
// type (a reflect.Type or a value of the struct, or a pointer to one).
func Attributes(of any) (map[string]phases.Attribute, error) {
	rt, err := structType(of)
	if err != nil {
		return nil, err
	}
	out := map[string]phases.Attribute{}
	for _, f := range fields(rt) {
		ty, err := ctyTypeOf(f.Type)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", rt.Name(), f.Name, err)
		}
		out[f.Tag.Get("cty")] = phases.Attribute{
			Type:        ty,
			Required:    f.Tag.Get("required") == "true",
			Sensitive:   f.Tag.Get("sensitive") == "true",
			Description: f.Tag.Get("doc"),
		}
	}
	return out, nil
}

// Types derives an object's attribute types (the outputs of a step type)
// from a struct value or type; nil for nil.
func Types(of any) (map[string]cty.Type, error) {
	if of == nil {
		return nil, nil
	}
	attrs, err := Attributes(of)
	if err != nil {
		return nil, err
	}
	out := make(map[string]cty.Type, len(attrs))
	for k, a := range attrs {
		out[k] = a.Type
	}
	return out, nil
}

// Block is Attributes as a phases.Block; it panics on an unsupported
// field, a programming error found by the first test that loads the
// schema.
func Block(of any) phases.Block {
	attrs, err := Attributes(of)
	if err != nil {
		panic("sdk: " + err.Error())
	}
	return phases.Block{Attributes: attrs}
}

// StepSchema derives the schema of a step type from its attributes
// struct A and its outputs (a struct value or type, or nil).
func StepSchema[A any](description string, outputs any) (phases.StepType, error) {
	attrs, err := Attributes(reflect.TypeFor[A]())
	if err != nil {
		return phases.StepType{}, err
	}
	outs, err := Types(outputs)
	if err != nil {
		return phases.StepType{}, fmt.Errorf("outputs: %w", err)
	}
	return phases.StepType{Description: description, Attributes: attrs, Outputs: outs}, nil
}

func structType(of any) (reflect.Type, error) {
	rt, ok := of.(reflect.Type)
	if !ok {
		rt = reflect.TypeOf(of)
	}
	for rt != nil && rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	if rt == nil || rt.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%v is not a struct", rt)
	}
	return rt, nil
}

// fields lists the fields of rt that carry a cty tag.
func fields(rt reflect.Type) []reflect.StructField {
	var out []reflect.StructField
	for i := range rt.NumField() {
		f := rt.Field(i)
		if name := f.Tag.Get("cty"); name != "" && f.IsExported() {
			out = append(out, f)
		}
	}
	return out
}

// ctyTypeOf maps a Go field type to its cty type.
func ctyTypeOf(rt reflect.Type) (cty.Type, error) {
	if rt == ctyValueType {
		return cty.DynamicPseudoType, nil
	}
	if rt == reflect.TypeFor[time.Duration]() {
		return cty.NilType, fmt.Errorf("time.Duration is not supported: use a string and parse it (\"30s\")")
	}
	switch rt.Kind() {
	case reflect.String:
		return cty.String, nil
	case reflect.Bool:
		return cty.Bool, nil
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Float64:
		return cty.Number, nil
	case reflect.Pointer:
		switch rt.Elem().Kind() {
		case reflect.String, reflect.Bool, reflect.Int, reflect.Int64, reflect.Int32, reflect.Float64:
			return ctyTypeOf(rt.Elem())
		}
	case reflect.Slice:
		et, err := ctyTypeOf(rt.Elem())
		if err != nil {
			return cty.NilType, err
		}
		return cty.List(et), nil
	case reflect.Map:
		if rt.Key().Kind() != reflect.String {
			break
		}
		et, err := ctyTypeOf(rt.Elem())
		if err != nil {
			return cty.NilType, err
		}
		return cty.Map(et), nil
	case reflect.Struct:
		attrs := map[string]cty.Type{}
		var optional []string
		for _, f := range fields(rt) {
			t, err := ctyTypeOf(f.Type)
			if err != nil {
				return cty.NilType, fmt.Errorf("%s: %w", f.Name, err)
			}
			attrs[f.Tag.Get("cty")] = t
			if f.Tag.Get("optional") == "true" {
				optional = append(optional, f.Tag.Get("cty"))
			}
		}
		if len(optional) > 0 {
			return cty.ObjectWithOptionalAttrs(attrs, optional), nil
		}
		return cty.Object(attrs), nil
	}
	return cty.NilType, fmt.Errorf("field type %s is not supported", rt)
}

// typeText names a type as an error message does: "a list of strings".
func typeText(t cty.Type) string {
	switch {
	case t == cty.String:
		return "a string"
	case t == cty.Number:
		return "a number"
	case t == cty.Bool:
		return "a bool"
	case t.IsListType() && t.ElementType().IsPrimitiveType():
		return "a list of " + strings.TrimPrefix(typeText(t.ElementType()), "a ") + "s"
	case t.IsMapType() && t.ElementType().IsPrimitiveType():
		return "a map of " + strings.TrimPrefix(typeText(t.ElementType()), "a ") + "s"
	}
	return t.FriendlyName()
}
