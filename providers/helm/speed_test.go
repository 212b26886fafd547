package helm_test

import (
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers/helm"
)

// bigRelease installs the 20-object chart and returns the config of an
// upgrade that changes six of its objects.
func bigRelease(tb testing.TB, k *kube) (*helm.Provider, cty.Value) {
	p := k.provider(tb, nil)
	ns := k.namespace(tb, "speed")
	cfg := func(msg string) cty.Value {
		return obj(map[string]cty.Value{"name": str("big"), "chart": str("charts/big"), "namespace": str(ns), "create_namespace": cty.True,
			"values": obj(map[string]cty.Value{"message": str(msg)})})
	}
	mustApply(tb, p, helm.Release, "big", cfg("one"), nil)
	return p, cfg("two")
}

func BenchmarkPlanRelease(b *testing.B) {
	k := lab(b)
	p, cfg := bigRelease(b, k)
	mustPlan(b, p, helm.Release, "big", cfg)
	b.ResetTimer()
	for b.Loop() {
		mustPlan(b, p, helm.Release, "big", cfg)
	}
}
