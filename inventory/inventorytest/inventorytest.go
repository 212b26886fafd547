// Package inventorytest holds what inventory's and scaffold's tests share:
// migrate's providers' schemas and examples/homelab loaded as migrate init
// loads it.
package inventorytest

import (
	"sync"
	"testing"

	"github.com/homelab-migrate/migrate/examples/homelab"
	"github.com/homelab-migrate/migrate/inventory"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/helm/helmschema"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/local"
	"github.com/homelab-migrate/migrate/providers/talos/talosschema"
)

// Schemas are migrate's providers' schemas, as cmd/migrate's registry has
// them.
func Schemas() map[string]phases.Schema {
	return map[string]phases.Schema{
		"local":              local.New().Schema(),
		"incus":              incus.Factory().Schema(),
		talosschema.TypeName: talosschema.Schema,
		helmschema.TypeName:  helmschema.Schema,
	}
}

var homelabTemplate = sync.OnceValues(func() (*inventory.Template, error) {
	return inventory.LoadTemplate(homelab.Runbook(), Schemas())
})

// Template is examples/homelab as migrate init loads it, loaded once.
func Template(t testing.TB) *inventory.Template {
	t.Helper()
	tm, err := homelabTemplate()
	if err != nil {
		t.Fatal(err)
	}
	return tm
}
