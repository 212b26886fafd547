package sdk

import (
	"fmt"
	"reflect"
	"sort"
	"sync"

	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/gocty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/secret"
)

// UnknownText stands for a string not known until apply, in the
// attributes a handler that accepts unknown values is given.
const UnknownText = phases.UnknownText // the engine names the step it waits for

// config is a block's evaluated configuration made ready for decoding:
// every attribute of the schema present (null when absent) and converted
// to its type, marks removed and remembered by path.
type config struct {
	addr  phases.Address
	attrs map[string]phases.Attribute
	obj   cty.Value // an object of every attribute, unmarked
	marks []cty.Path
	// public are the strings of the configuration that are not
	// sensitive: text the runbook shows in clear anyway.
	public     []string
	publicOnce sync.Once
	known      bool // obj is wholly known
}

// prepare checks the types of cfg against attrs and learns its secrets:
// every marked value and every attribute declared sensitive.
func prepare(addr phases.Address, cfg cty.Value, attrs map[string]phases.Attribute, objTy cty.Type, scrub *secret.Scrubber) (*config, phases.Diagnostics) {
	c := &config{addr: addr, attrs: attrs}
	if cfg == cty.NilVal {
		cfg = cty.NullVal(cty.DynamicPseudoType)
	}
	plain := cfg
	if cfg.ContainsMarked() {
		scrub.AddMarked(cfg)
		var pvm []cty.PathValueMarks
		plain, pvm = cfg.UnmarkDeepWithPaths()
		for _, m := range pvm {
			if _, ok := m.Marks[phases.SensitiveMark]; ok {
				c.marks = append(c.marks, m.Path)
			}
		}
	}
	if plain.IsKnown() && !plain.IsNull() && plain.Type().Equals(objTy) {
		// Already the schema's shape, as the loader gives it: only the
		// attributes declared sensitive are left to learn.
		c.obj = plain
		c.known = plain.IsWhollyKnown()
		for name, a := range attrs {
			if a.Sensitive {
				scrub.AddValue(plain.GetAttr(name))
			}
		}
		return c, nil
	}
	var diags phases.Diagnostics
	vals := make(map[string]cty.Value, len(attrs))
	for name, a := range attrs {
		v := attrOf(plain, name)
		if v.IsKnown() && !v.IsNull() && !v.Type().Equals(a.Type) {
			cv, err := convert.Convert(v, a.Type)
			if err != nil {
				diags = append(diags, phases.Errorf("Incorrect Attribute Type", "The %q attribute of %s must be %s, not %s.", name, addr, typeText(a.Type), v.Type().FriendlyName())...)
				cv = cty.NullVal(a.Type)
			}
			v = cv
		} else if v.IsNull() {
			v = cty.NullVal(a.Type.WithoutOptionalAttributesDeep())
		} else if !v.IsKnown() {
			v = cty.UnknownVal(a.Type.WithoutOptionalAttributesDeep())
		}
		if a.Sensitive {
			scrub.AddValue(v)
		}
		vals[name] = v
	}
	c.obj = cty.ObjectVal(vals)
	c.known = c.obj.IsWhollyKnown()
	return c, diags
}

// publicStrings lists the strings of the configuration that are not
// sensitive; only needed when there are secrets to scrub.
func (c *config) publicStrings() []string {
	c.publicOnce.Do(func() {
		_ = cty.Walk(c.obj, func(p cty.Path, v cty.Value) (bool, error) {
			if len(p) > 0 && c.sensitivePath(p) {
				return false, nil
			}
			if v.IsKnown() && !v.IsNull() && v.Type() == cty.String {
				c.public = append(c.public, v.AsString())
			}
			return true, nil
		})
	})
	return c.public
}

func attrOf(obj cty.Value, name string) cty.Value {
	switch {
	case !obj.IsKnown():
		return cty.UnknownVal(cty.DynamicPseudoType)
	case obj.IsNull():
	case obj.Type().IsObjectType() && obj.Type().HasAttribute(name):
		return obj.GetAttr(name)
	case obj.Type().IsMapType() && obj.HasIndex(cty.StringVal(name)).True():
		return obj.Index(cty.StringVal(name))
	}
	return cty.NullVal(cty.DynamicPseudoType)
}

// sensitivePath reports whether the value at p, or one holding it, is
// marked or belongs to an attribute declared sensitive.
func (c *config) sensitivePath(p cty.Path) bool {
	if len(p) > 0 {
		if ga, ok := p[0].(cty.GetAttrStep); ok && c.attrs[ga.Name].Sensitive {
			return true
		}
	}
	for _, m := range c.marks {
		if len(m) <= len(p) && m.Equals(p[:len(m)]) {
			return true
		}
	}
	return false
}

// unknown lists the attributes not wholly known.
func (c *config) unknown() []string {
	if c.known {
		return nil
	}
	var out []string
	for _, name := range sortedNames(c.attrs) {
		if !c.obj.GetAttr(name).IsWhollyKnown() {
			out = append(out, name)
		}
	}
	return out
}

func (c *config) required() phases.Diagnostics {
	missing := false
	for name, a := range c.attrs {
		missing = missing || a.Required && c.obj.GetAttr(name).IsNull()
	}
	if !missing {
		return nil
	}
	var diags phases.Diagnostics
	for _, name := range sortedNames(c.attrs) {
		if c.attrs[name].Required && c.obj.GetAttr(name).IsNull() {
			diags = append(diags, phases.Errorf("Missing Required Attribute", "The %q attribute of %s is required.", name, c.addr)...)
		}
	}
	return diags
}

// decode fills the struct target points to. Unknown values become
// UnknownText in strings and zero values elsewhere; null ones zero values.
func (c *config) decode(target any) phases.Diagnostics {
	known := c.obj
	if !c.known {
		known, _ = cty.Transform(c.obj, func(_ cty.Path, v cty.Value) (cty.Value, error) {
			if v.IsKnown() {
				return v, nil
			}
			if v.Type() == cty.String {
				return cty.StringVal(UnknownText), nil
			}
			return cty.NullVal(v.Type()), nil
		})
	}
	rv := reflect.ValueOf(target).Elem()
	var diags phases.Diagnostics
	for _, f := range tagged(rv.Type()) {
		name := f.name
		if err := decodeValue(known.GetAttr(name), rv.FieldByIndex(f.index)); err != nil {
			diags = append(diags, phases.Errorf("Invalid Attribute Value", "The %q attribute of %s %s.", name, c.addr, err)...)
		}
	}
	return diags
}

// decodeValue sets rv from v; null leaves rv as it is (its zero value).
func decodeValue(v cty.Value, rv reflect.Value) error {
	if v.IsNull() {
		return nil
	}
	if rv.Type() == ctyValueType {
		rv.Set(reflect.ValueOf(v))
		return nil
	}
	switch rv.Kind() {
	case reflect.Struct:
		for _, f := range tagged(rv.Type()) {
			if !v.Type().HasAttribute(f.name) {
				continue
			}
			if err := decodeValue(v.GetAttr(f.name), rv.FieldByIndex(f.index)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Pointer:
		p := reflect.New(rv.Type().Elem())
		if err := decodeValue(v, p.Elem()); err != nil {
			return err
		}
		rv.Set(p)
		return nil
	case reflect.Slice:
		s := reflect.MakeSlice(rv.Type(), 0, v.LengthInt())
		for it := v.ElementIterator(); it.Next(); {
			_, e := it.Element()
			if e.IsNull() {
				return fmt.Errorf("must not contain null elements")
			}
			x := reflect.New(rv.Type().Elem()).Elem()
			if err := decodeValue(e, x); err != nil {
				return err
			}
			s = reflect.Append(s, x)
		}
		rv.Set(s)
		return nil
	case reflect.Map:
		m := reflect.MakeMapWithSize(rv.Type(), v.LengthInt())
		for it := v.ElementIterator(); it.Next(); {
			k, e := it.Element()
			if e.IsNull() {
				return fmt.Errorf("must not contain null values (key %q)", k.AsString())
			}
			x := reflect.New(rv.Type().Elem()).Elem()
			if err := decodeValue(e, x); err != nil {
				return err
			}
			m.SetMapIndex(reflect.ValueOf(k.AsString()).Convert(rv.Type().Key()), x)
		}
		rv.Set(m)
		return nil
	}
	if err := gocty.FromCtyValue(v, rv.Addr().Interface()); err != nil {
		return fmt.Errorf("is invalid: %v", err)
	}
	return nil
}

// path builds the path of an attribute and of keys (int or string) inside it.
func path(attr string, keys []any) cty.Path {
	p := cty.GetAttrPath(attr)
	for _, k := range keys {
		switch k := k.(type) {
		case int:
			p = p.IndexInt(k)
		case string:
			p = p.IndexString(k)
		default:
			panic(fmt.Sprintf("sdk: path key %v is neither an int nor a string", k))
		}
	}
	return p
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

type field struct {
	name  string
	index []int
}

var taggedCache sync.Map // reflect.Type -> []field

// tagged is fields by name and index, kept per type: decoding runs on
// every call.
func tagged(rt reflect.Type) []field {
	if f, ok := taggedCache.Load(rt); ok {
		return f.([]field)
	}
	var out []field
	for _, f := range fields(rt) {
		out = append(out, field{f.Tag.Get("cty"), f.Index})
	}
	taggedCache.Store(rt, out)
	return out
}

// objectType is the object type of a schema's attributes.
func objectType(attrs map[string]phases.Attribute) cty.Type {
	types := make(map[string]cty.Type, len(attrs))
	for k, a := range attrs {
		types[k] = a.Type.WithoutOptionalAttributesDeep() // the type of a converted value
	}
	return cty.Object(types)
}
