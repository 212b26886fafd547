package helm_test

import (
	"sort"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers/helm"
)

// speedGoal is the bound for a plan (render, diff and PodSecurity
// checks) of a ~20-object chart against the local API server.
const speedGoal = 300 * time.Millisecond

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

// TestPlanSpeed logs the plan time of a 20-object release (an upgrade
// with a diff) and fails beyond the goal.
func TestPlanSpeed(t *testing.T) {
	k := lab(t)
	p, cfg := bigRelease(t, k)
	mustPlan(t, p, helm.Release, "big", cfg) // warm: discovery cached
	var times []time.Duration
	for range 15 {
		start := time.Now()
		r := mustPlan(t, p, helm.Release, "big", cfg)
		times = append(times, time.Since(start))
		if r.Diff == "" {
			t.Fatal("empty diff")
		}
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	median, worst := times[len(times)/2], times[len(times)-1]
	t.Logf("plan of a 20-object release (render + diff + PodSecurity): median %v, worst %v over %d plans (goal < %v)", median, worst, len(times), speedGoal)
	if median > speedGoal {
		t.Errorf("plan median %v exceeds the goal of %v", median, speedGoal)
	}
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
