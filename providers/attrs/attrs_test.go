package attrs_test

import (
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/attrs"
)

func TestGetAndStr(t *testing.T) {
	t.Parallel()
	o := cty.ObjectVal(map[string]cty.Value{
		"name":  cty.StringVal("media"),
		"count": cty.NumberIntVal(3),
		"later": cty.UnknownVal(cty.String),
		"bad":   cty.ListValEmpty(cty.String),
	})
	var d phases.Diagnostics
	if s, ok := attrs.Str(&d, "x.y", attrs.Get(o, "name"), "name", ""); s != "media" || !ok {
		t.Errorf("name = %q %v", s, ok)
	}
	if s, _ := attrs.Str(&d, "x.y", attrs.Get(o, "count"), "count", ""); s != "3" {
		t.Errorf("count = %q", s)
	}
	if s, ok := attrs.Str(&d, "x.y", attrs.Get(o, "absent"), "absent", "def"); s != "def" || !ok {
		t.Errorf("absent = %q %v", s, ok)
	}
	if _, ok := attrs.Str(&d, "x.y", attrs.Get(o, "later"), "later", ""); ok {
		t.Error("an unknown value was reported known")
	}
	if attrs.Get(cty.DynamicVal, "name").IsKnown() {
		t.Error("an attribute of an unknown block must be unknown")
	}
	if d.HasErrors() {
		t.Fatalf("unexpected: %v", d.Err())
	}
	attrs.Str(&d, "x.y", attrs.Get(o, "bad"), "bad", "")
	if !d.HasErrors() || !strings.Contains(d.Err().Error(), `"bad" attribute of x.y must be a string`) {
		t.Errorf("wrong type: %v", d.Err())
	}
}

func TestCollections(t *testing.T) {
	t.Parallel()
	var d phases.Diagnostics
	list := cty.TupleVal([]cty.Value{cty.StringVal("a"), cty.UnknownVal(cty.String)})
	got, known := attrs.Strs(&d, "s", list, "l")
	if known || len(got) != 1 || got[0] != "a" {
		t.Errorf("Strs = %v %v", got, known)
	}
	m, known := attrs.StrMap(&d, "s", cty.MapVal(map[string]cty.Value{"k": cty.StringVal("v")}), "m")
	if !known || m["k"] != "v" {
		t.Errorf("StrMap = %v %v", m, known)
	}
	if b, known := attrs.Bool(&d, "s", cty.NullVal(cty.Bool), "b", true); !b || !known {
		t.Errorf("Bool default = %v %v", b, known)
	}
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	attrs.Strs(&d, "s", cty.StringVal("x"), "l")
	attrs.StrMap(&d, "s", cty.StringVal("x"), "m")
	attrs.Bool(&d, "s", cty.StringVal("x"), "b", false)
	if len(d) != 3 {
		t.Errorf("want 3 type errors, got %d: %v", len(d), d.Err())
	}
}
