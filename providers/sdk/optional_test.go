package sdk_test

import (
	"context"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

type checks struct {
	Services []string `cty:"services" optional:"true"`
	Kube     bool     `cty:"kube" optional:"true"`
}

type withChecks struct {
	Checks checks `cty:"checks"`
}

// TestOptionalObjectAttributes: a nested struct's fields tagged optional
// make an object type with optional attributes, and a value that leaves
// them out decodes with them zero.
func TestOptionalObjectAttributes(t *testing.T) {
	got, err := sdk.Attributes(withChecks{})
	if err != nil {
		t.Fatal(err)
	}
	want := cty.ObjectWithOptionalAttrs(map[string]cty.Type{"services": cty.List(cty.String), "kube": cty.Bool}, []string{"services", "kube"})
	if !got["checks"].Type.Equals(want) {
		t.Fatalf("checks: %#v, want %#v", got["checks"].Type, want)
	}
	var seen checks
	step := &sdk.StepType[struct{}, withChecks, struct{}, struct{}]{Name: "s",
		Apply: func(_ context.Context, _ *sdk.Call[struct{}], a withChecks, _ struct{}, _ *sdk.Prior[struct{}, struct{}]) sdk.Apply[struct{}, struct{}] {
			seen = a.Checks
			return sdk.Apply[struct{}, struct{}]{}
		}}
	p := &sdk.Provider[struct{}]{Name: "p", Steps: []sdk.Step[struct{}]{step}}
	p.Configure(context.Background(), providers.ConfigureRequest{Name: "p"})
	for _, cfg := range []cty.Value{
		cty.ObjectVal(map[string]cty.Value{"checks": cty.ObjectVal(map[string]cty.Value{"kube": cty.True})}),
		cty.ObjectVal(map[string]cty.Value{"checks": cty.NullVal(cty.DynamicPseudoType)}),
	} {
		seen = checks{}
		r := p.Apply(context.Background(), providers.ApplyRequest{Type: "s", Addr: phases.Address{Type: "s", Name: "a"}, Config: cfg})
		if err := r.Diagnostics.Err(); err != nil {
			t.Fatalf("%#v: %v", cfg, err)
		}
		if seen.Services != nil || seen.Kube != cfg.GetAttr("checks").IsKnown() && !cfg.GetAttr("checks").IsNull() {
			t.Errorf("%#v decoded as %+v", cfg, seen)
		}
	}
}
