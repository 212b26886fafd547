package local

import (
	"fmt"
	"math/big"
	"sort"
	"strings"
	"time"

	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/homelab-migrate/migrate/phases"
)

// unknownText stands in for a value that is not known until apply.
const unknownText = "(known after apply)"

// val is one primitive attribute value as the provider uses it: the plain
// value, and whether it was null, unknown or marked sensitive.
type val struct {
	s         string
	null      bool
	unknown   bool
	sensitive bool
}

// show is how the value may be printed: never a sensitive value in clear.
func (v val) show() string {
	switch {
	case v.sensitive:
		return phases.Redacted
	case v.unknown:
		return unknownText
	}
	return v.s
}

// known reports whether the value is set and known.
func (v val) known() bool { return !v.null && !v.unknown }

// kv is one entry of a map attribute.
type kv struct {
	key string
	val val
}

// list is a list(string) attribute.
type list struct {
	items     []val
	null      bool
	unknown   bool
	sensitive bool
}

func (l list) known() bool {
	if l.null || l.unknown {
		return false
	}
	for _, it := range l.items {
		if it.unknown {
			return false
		}
	}
	return true
}

// strs returns the plain strings; call it only when known.
func (l list) strs() []string {
	out := make([]string, len(l.items))
	for i, it := range l.items {
		out[i] = it.s
	}
	return out
}

// smap is a map(string) attribute, sorted by key.
type smap struct {
	entries   []kv
	null      bool
	unknown   bool
	sensitive bool
}

// decoder reads attributes out of a step's evaluated configuration,
// unmarking values and collecting problems as diagnostics.
type decoder struct {
	addr  phases.Address
	obj   cty.Value // unmarked object, or a null/unknown value
	sens  bool      // the whole object was marked sensitive
	diags phases.Diagnostics
}

func newDecoder(addr phases.Address, cfg cty.Value) *decoder {
	d := &decoder{addr: addr}
	if cfg == cty.NilVal {
		cfg = cty.NullVal(cty.DynamicPseudoType)
	}
	d.obj, d.sens = unmark(cfg, false)
	return d
}

func unmark(v cty.Value, sens bool) (cty.Value, bool) {
	if v.IsMarked() {
		var marks cty.ValueMarks
		v, marks = v.Unmark()
		if marks.Has(phases.SensitiveMark) {
			sens = true
		}
	}
	return v, sens
}

// attr returns the attribute, or null when it is absent.
func (d *decoder) attr(name string) (cty.Value, bool) {
	o := d.obj
	if !o.IsKnown() {
		return cty.UnknownVal(cty.DynamicPseudoType), d.sens
	}
	if o.IsNull() || !(o.Type().IsObjectType() || o.Type().IsMapType()) {
		return cty.NullVal(cty.DynamicPseudoType), d.sens
	}
	if o.Type().IsObjectType() {
		if !o.Type().HasAttribute(name) {
			return cty.NullVal(cty.DynamicPseudoType), d.sens
		}
		return unmark(o.GetAttr(name), d.sens)
	}
	k := cty.StringVal(name)
	if !o.HasIndex(k).True() {
		return cty.NullVal(cty.DynamicPseudoType), d.sens
	}
	return unmark(o.Index(k), d.sens)
}

func (d *decoder) errorf(summary, format string, args ...any) {
	d.diags = append(d.diags, phases.Errorf(summary, format, args...)...)
}

func (d *decoder) wrongType(name, want string, got cty.Type) {
	d.errorf("Incorrect Attribute Type", "The %q attribute of %s must be %s, not %s.", name, d.addr, want, got.FriendlyName())
}

// prim converts a primitive value (already unmarked) to its string form.
func (d *decoder) prim(name string, v cty.Value, sens bool, ty cty.Type, want string) val {
	if v.IsNull() {
		return val{null: true, sensitive: sens}
	}
	if !v.IsKnown() {
		return val{unknown: true, sensitive: sens}
	}
	c, err := convert.Convert(v, ty)
	if err != nil {
		d.wrongType(name, want, v.Type())
		return val{null: true, sensitive: sens}
	}
	c, sens = unmark(c, sens)
	switch ty {
	case cty.Number:
		return val{s: c.AsBigFloat().Text('f', -1), sensitive: sens}
	case cty.Bool:
		if c.True() {
			return val{s: "true", sensitive: sens}
		}
		return val{s: "false", sensitive: sens}
	}
	return val{s: c.AsString(), sensitive: sens}
}

func (d *decoder) str(name string) val {
	v, sens := d.attr(name)
	return d.prim(name, v, sens, cty.String, "a string")
}

func (d *decoder) boolean(name string) (b bool, v val) {
	a, sens := d.attr(name)
	v = d.prim(name, a, sens, cty.Bool, "a bool")
	return v.s == "true", v
}

// number returns an integral number attribute; def when null.
func (d *decoder) integer(name string, def int) (int, val) {
	a, sens := d.attr(name)
	v := d.prim(name, a, sens, cty.Number, "a number")
	if v.null {
		return def, val{s: fmt.Sprint(def)}
	}
	if !v.known() {
		return def, v
	}
	f, _, err := big.ParseFloat(v.s, 10, 64, big.ToNearestEven)
	if err != nil || !f.IsInt() || new(big.Float).Abs(f).Cmp(big.NewFloat(1e9)) > 0 {
		d.errorf("Invalid Attribute Value", "The %q attribute of %s must be a whole number, not %s.", name, d.addr, v.show())
		return def, v
	}
	n, _ := f.Int64()
	return int(n), v
}

// duration returns a non-negative duration attribute; def when null.
func (d *decoder) duration(name string, def string, required bool) (time.Duration, val) {
	v := d.str(name)
	if v.null {
		if required {
			d.missing(name)
			return 0, v
		}
		v = val{s: def}
	}
	if !v.known() {
		return 0, v
	}
	dur, err := time.ParseDuration(v.s)
	if err != nil || dur < 0 {
		d.errorf("Invalid Attribute Value", "The %q attribute of %s must be a duration such as \"30s\" or \"5m\", not %q.", name, d.addr, v.show())
		return 0, v
	}
	return dur, v
}

func (d *decoder) missing(name string) {
	d.errorf("Missing Required Attribute", "The %q attribute of %s is required.", name, d.addr)
}

// strList reads a list(string) attribute (a tuple or set is accepted too).
func (d *decoder) strList(name string) list {
	v, sens := d.attr(name)
	if v.IsNull() {
		return list{null: true, sensitive: sens}
	}
	if !v.IsKnown() {
		return list{unknown: true, sensitive: sens}
	}
	ty := v.Type()
	if !(ty.IsListType() || ty.IsTupleType() || ty.IsSetType()) {
		d.wrongType(name, "a list of strings", ty)
		return list{null: true, sensitive: sens}
	}
	l := list{sensitive: sens, items: make([]val, 0, v.LengthInt())}
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		e, esens := unmark(e, sens)
		item := d.prim(name, e, esens, cty.String, "a list of strings")
		if item.null {
			d.errorf("Invalid Attribute Value", "The %q attribute of %s must not contain null elements.", name, d.addr)
		}
		l.items = append(l.items, item)
	}
	return l
}

// strMap reads a map(string) attribute (an object is accepted too).
func (d *decoder) strMap(name string) smap {
	v, sens := d.attr(name)
	if v.IsNull() {
		return smap{null: true, sensitive: sens}
	}
	if !v.IsKnown() {
		return smap{unknown: true, sensitive: sens}
	}
	ty := v.Type()
	if !(ty.IsMapType() || ty.IsObjectType()) {
		d.wrongType(name, "a map of strings", ty)
		return smap{null: true, sensitive: sens}
	}
	m := smap{sensitive: sens}
	for it := v.ElementIterator(); it.Next(); {
		k, e := it.Element()
		k, _ = unmark(k, false)
		e, esens := unmark(e, sens)
		item := d.prim(name, e, esens, cty.String, "a map of strings")
		if item.null {
			d.errorf("Invalid Attribute Value", "The %q attribute of %s must not contain null values (key %q).", name, d.addr, k.AsString())
		}
		m.entries = append(m.entries, kv{key: k.AsString(), val: item})
	}
	sort.Slice(m.entries, func(i, j int) bool { return m.entries[i].key < m.entries[j].key })
	return m
}

// secrets collects the plain text of sensitive values, longest first, so
// that output can be scrubbed of them.
type secrets [][]byte

func (s *secrets) add(v val) {
	if v.sensitive && v.known() && v.s != "" {
		for _, x := range *s {
			if string(x) == v.s {
				return
			}
		}
		*s = append(*s, []byte(v.s))
		sort.Slice(*s, func(i, j int) bool { return len((*s)[i]) > len((*s)[j]) })
	}
}

// redact replaces every secret in text.
func (s secrets) redact(text string) string {
	for _, x := range s {
		text = strings.ReplaceAll(text, string(x), phases.Redacted)
	}
	return text
}

// showArgv renders an argv as a person would type it in a shell, with
// sensitive and unknown elements replaced.
func showArgv(l list) string {
	switch {
	case l.sensitive:
		return phases.Redacted
	case l.unknown:
		return unknownText
	}
	var b strings.Builder
	for i, it := range l.items {
		if i > 0 {
			b.WriteByte(' ')
		}
		if it.sensitive || it.unknown {
			b.WriteString(it.show())
			continue
		}
		b.WriteString(shellQuote(it.s))
	}
	return b.String()
}

func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%+=:,./_-", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
