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
