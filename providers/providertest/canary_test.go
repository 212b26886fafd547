package providertest_test

import (
	"encoding/json"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/providertest"
)

// TestLeaksFindsEveryField: the walk of Canary sees a secret wherever a
// response can carry it, and not inside sensitive cty values.
func TestLeaksFindsEveryField(t *testing.T) {
	const s = "canary-4242"
	cases := map[string]any{
		"diff":        providers.PlanResponse{Diff: "x " + s},
		"private":     providers.PlanResponse{Private: json.RawMessage(`{"k":"` + s + `"}`)},
		"diag":        providers.ApplyResponse{Diagnostics: phases.Errorf("Boom", "it was %s", s)},
		"revert data": providers.ApplyResponse{Revert: &providers.RevertData{Data: json.RawMessage(`["` + s + `"]`)}},
		"inv desc":    providers.ReadResponse{Revert: &providers.RevertData{Description: s}},
		"record":      providers.ApplyResponse{Facts: map[string]string{"by": s}},
		"output":      providers.ApplyResponse{Outputs: cty.ObjectVal(map[string]cty.Value{"m": cty.MapVal(map[string]cty.Value{"k": cty.StringVal("a" + s)})})},
	}
	for name, v := range cases {
		if len(providertest.Leaks(v, []string{s})) == 0 {
			t.Errorf("%s: the secret was not found", name)
		}
	}
	hidden := providers.ApplyResponse{Outputs: cty.ObjectVal(map[string]cty.Value{
		"m": cty.MapVal(map[string]cty.Value{"k": cty.StringVal(s)}).Mark(phases.SensitiveMark),
		"n": cty.StringVal(s).Mark(phases.SensitiveMark),
	})}
	if l := providertest.Leaks(hidden, []string{s}); len(l) != 0 {
		t.Errorf("sensitive outputs reported: %v", l)
	}
}

// TestLeaksFindsEveryEncoding: a canary is found however it was encoded
// on the way out, and not in text that only resembles it.
func TestLeaksFindsEveryEncoding(t *testing.T) {
	const s = "P@ss'w0rd &<x>"
	for _, text := range []string{
		`printf %s 'P@ss'\''w0rd &<x>'`,            // shell-quoted
		`{"diff":"P@ss'w0rd \u0026\u003cx\u003e"}`, // JSON, as Go escapes it
		"UEBzcyd3MHJkICY8eD4=",                     // base64
		"?pw=P%40ss%27w0rd+%26%3Cx%3E",             // a URL query
	} {
		if len(providertest.Leaks(text, []string{s})) == 0 {
			t.Errorf("%s: the secret was not found", text)
		}
	}
	if l := providertest.Leaks("P@ss w0rd", []string{s}); len(l) != 0 {
		t.Errorf("found in text without it: %v", l)
	}
}
