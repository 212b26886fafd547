package helm_test

import (
	"testing"

	"github.com/homelab-migrate/migrate/providers/helm"
	"github.com/homelab-migrate/migrate/providers/helm/helmschema"
	"github.com/homelab-migrate/migrate/providers/plugin"
	"github.com/homelab-migrate/migrate/providers/providertest"
)

// TestSchemaGenerated: the schema migrate compiles in (helmschema, data
// generated from the step types' declarations) is the one the provider
// derives from them, rollback sentences included; the plugin handshake
// needs the two equal. The descriptions themselves are pinned by the
// generated reference (docs/reference.md) and its check.
func TestSchemaGenerated(t *testing.T) {
	t.Parallel()
	derived := helm.New().Schema()
	providertest.SameGenerated(t, derived, helmschema.Schema, "go generate ./providers/helm (or make generate)")
	if a, b := plugin.SchemaDigest(derived), plugin.SchemaDigest(helmschema.Schema); a != b {
		t.Errorf("the provider's schema digest %s differs from helmschema's %s", a, b)
	}
	if helm.TypeName != helmschema.TypeName {
		t.Errorf("helm.TypeName %q, helmschema.TypeName %q", helm.TypeName, helmschema.TypeName)
	}
}
