package incus

import (
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
)

// DecodeInstance decodes an incus_instance configuration as Plan and
// Apply do, for the golden request bodies.
func DecodeInstance(addr phases.Address, cfg cty.Value) (InstanceSpec, phases.Diagnostics) {
	d := newDecoder(addr, cfg)
	c := &call{decoder: d}
	s := c.decodeInstance()
	return s, c.diags
}

// CreateDiff is the plan's text for creating the instance of s.
func CreateDiff(s InstanceSpec) string { return createDiff(s) }
