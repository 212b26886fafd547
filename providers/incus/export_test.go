package incus

import (
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// DecodeInstance decodes an incus_instance configuration as Plan and
// Apply do, for the golden request bodies.
func DecodeInstance(addr phases.Address, cfg cty.Value) (DesiredInstance, phases.Diagnostics) {
	var a InstanceSpec
	if d := sdk.Decode(providers.ConfigureRequest{Name: addr.String(), Config: cfg}, &a, nil); d.HasErrors() {
		return DesiredInstance{InstanceSpec: a}, d
	}
	return normalize(addr, a, func(string, ...any) bool { return false })
}

// CreateDiff is the plan's text for creating the instance of s.
func CreateDiff(s DesiredInstance) string { return createDiff(s) }

// Normalize checks a decoded incus_instance step as Validate does.
func Normalize(addr phases.Address, s *InstanceSpec) phases.Diagnostics {
	_, diags := normalize(addr, *s, func(string, ...any) bool { return false })
	return diags
}

// PoolFix is how the diagnostic of a missing pool says to fix it.
func PoolFix(missing string, has []string) string { return poolFix(missing, has) }
