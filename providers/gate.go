package providers

import (
	"maps"
	"slices"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
)

// Gate is what every call of a provider checks first: the step type must
// be one of the provider's (schema), and its Configure must have run
// (configured) without errors (configDiags). It returns nil when the call
// may go on.
func Gate(provider string, schema phases.Schema, typ string, configured bool, configDiags phases.Diagnostics) phases.Diagnostics {
	if _, ok := schema.StepTypes[typ]; !ok {
		return phases.Errorf("Unsupported Step Type", "The %s provider has no step type %q; it has %s.",
			provider, typ, andList(slices.Sorted(maps.Keys(schema.StepTypes))))
	}
	if configDiags.HasErrors() {
		return phases.Errorf("Provider Configuration Invalid", "The %s provider block has errors (reported when it was configured); fix them first.", provider)
	}
	if !configured {
		return phases.Errorf("Provider Not Configured", "The %s provider was used before its provider block was configured.", provider)
	}
	return nil
}

// andList joins names as "a, b and c".
func andList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
