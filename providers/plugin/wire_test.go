package plugin

import (
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
)

func TestValueRoundTrip(t *testing.T) {
	const doc = "hostname: talos-home\ntoken: s3cr3t-t0ken\n"
	s := func(v string) cty.Value { return cty.StringVal(v).Mark(phases.SensitiveMark) }
	for name, v := range map[string]cty.Value{
		"nil":     cty.NilVal,
		"null":    cty.NullVal(cty.String),
		"unknown": cty.UnknownVal(cty.Object(map[string]cty.Type{"a": cty.String})),
		"object": cty.ObjectVal(map[string]cty.Value{
			"plain":  cty.StringVal("x"),
			"secret": s("hunter2"),
			"list":   cty.ListVal([]cty.Value{cty.StringVal("a"), s("b")}),
			"map":    cty.MapVal(map[string]cty.Value{"k": s("v"), "l": cty.StringVal("w")}),
			"n":      cty.NumberIntVal(42),
			"later":  cty.UnknownVal(cty.String),
		}),
		"whole": cty.ObjectVal(map[string]cty.Value{"a": cty.StringVal("x")}).Mark(phases.SensitiveMark),
		// a machine config as user_data: its secrets listed, so that
		// the scrubbers of migrate learn them and not its words
		"document": cty.ObjectVal(map[string]cty.Value{"user_data": s(doc).Mark(phases.NewSecretParts(doc, []string{"s3cr3t-t0ken"}))}),
	} {
		w, err := encodeValue(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := decodeValue(w)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if v == cty.NilVal {
			if got != cty.NilVal {
				t.Errorf("nil came back as %#v", got)
			}
			continue
		}
		if !got.RawEquals(v) {
			t.Errorf("%s: sent %#v, got %#v", name, v, got)
		}
	}
}

// A SecretParts mark made for another text (the document, transformed)
// does not cross: its value is then learned word by word, as any secret.
func TestStaleSecretPartsDropped(t *testing.T) {
	v := cty.StringVal("HOSTNAME: TALOS-HOME").Mark(phases.SensitiveMark).Mark(phases.NewSecretParts("hostname: talos-home", nil))
	w, err := encodeValue(v)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeValue(w)
	if err != nil {
		t.Fatal(err)
	}
	if want := cty.StringVal("HOSTNAME: TALOS-HOME").Mark(phases.SensitiveMark); !got.RawEquals(want) {
		t.Errorf("got %#v, want %#v", got, want)
	}
}
