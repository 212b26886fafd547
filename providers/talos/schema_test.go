package talos_test

import (
	"testing"

	"github.com/homelab-migrate/migrate/providers/plugin"
	"github.com/homelab-migrate/migrate/providers/providertest"
	"github.com/homelab-migrate/migrate/providers/talos"
	"github.com/homelab-migrate/migrate/providers/talos/talosschema"
)

// TestSchemaGenerated: the schema migrate compiles in (talosschema, data
// generated from the step types' declarations) is the one the provider
// derives from them, rollback sentences included; the plugin handshake
// needs the two equal. The descriptions themselves are pinned by the
// generated reference (docs/reference.md) and its check.
func TestSchemaGenerated(t *testing.T) {
	t.Parallel()
	derived := talos.New().Schema()
	providertest.SameGenerated(t, derived, talosschema.Schema, "go generate ./providers/talos (or make generate)")
	if a, b := plugin.SchemaDigest(derived), plugin.SchemaDigest(talosschema.Schema); a != b {
		t.Errorf("the provider's schema digest %s differs from talosschema's %s", a, b)
	}
	if talos.TypeName != talosschema.TypeName {
		t.Errorf("talos.TypeName %q, talosschema.TypeName %q", talos.TypeName, talosschema.TypeName)
	}
}
