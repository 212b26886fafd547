package sdk_test

import (
	"bytes"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/providertest"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// TestSchemaFileRoundTrip: what EncodeSchema writes, DecodeSchema reads
// back whole: types of every kind, required and sensitive attributes,
// outputs or none, the flags and the rollback sentence.
func TestSchemaFileRoundTrip(t *testing.T) {
	t.Parallel()
	in := phases.Schema{
		Provider: phases.Block{Attributes: map[string]phases.Attribute{
			"endpoint": {Type: cty.String, Required: true, Description: "Where."},
		}},
		StepTypes: map[string]phases.StepType{
			"thing": {
				Description: "A thing.",
				Attributes: map[string]phases.Attribute{
					"any":    {Type: cty.DynamicPseudoType, Description: "Anything."},
					"token":  {Type: cty.Map(cty.String), Sensitive: true},
					"verify": {Type: cty.ObjectWithOptionalAttrs(map[string]cty.Type{"n": cty.Number, "s": cty.List(cty.String)}, []string{"s"})},
				},
				Outputs:  map[string]cty.Type{"id": cty.String},
				Rollback: "Deletes it.",
				CanCheck: true, WaitsOnly: true, Rebase: true,
			},
			"none": {Description: "Nothing.", Attributes: map[string]phases.Attribute{}},
		},
	}
	b, err := sdk.EncodeSchema(in)
	if err != nil {
		t.Fatal(err)
	}
	out := sdk.DecodeSchema(b)
	if out.StepTypes["thing"].Rollback != "Deletes it." {
		t.Errorf("rollback %q, want the sentence", out.StepTypes["thing"].Rollback)
	}
	if out.StepTypes["none"].Outputs != nil || out.StepTypes["none"].Attributes == nil {
		t.Errorf("none: outputs %v (want nil), attributes %v (want empty)", out.StepTypes["none"].Outputs, out.StepTypes["none"].Attributes)
	}
	providertest.SameGenerated(t, in, out, "(the round trip)")
	again, _ := sdk.EncodeSchema(out)
	if !bytes.Equal(b, again) {
		t.Errorf("encoded again:\n%s\nwant\n%s", again, b)
	}
}
