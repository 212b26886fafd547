package plugin

import (
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

func BenchmarkCodecApply(b *testing.B) {
	req := providers.ApplyRequest{Type: "fake_step", Addr: phases.Address{Type: "fake_step", Name: "a"},
		Config: cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal("v"), "fail": cty.NullVal(cty.Bool)})}
	resp := providers.ApplyResponse{Outputs: req.Config, Revert: &providers.RevertData{Description: "undo", Data: []byte(`{"a":1}`)}}
	for b.Loop() {
		raw, _, err := encode(req)
		if err != nil {
			b.Fatal(err)
		}
		var got providers.ApplyRequest
		if err := decode(raw, &got, nil); err != nil {
			b.Fatal(err)
		}
		raw, _, _ = encode(resp)
		var r providers.ApplyResponse
		if err := decode(raw, &r, nil); err != nil {
			b.Fatal(err)
		}
	}
}
