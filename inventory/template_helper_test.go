package inventory_test

import (
	"io/fs"
	"testing"

	"github.com/homelab-migrate/migrate/inventory"
	"github.com/homelab-migrate/migrate/inventory/inventorytest"
)

// tmpl is examples/homelab as migrate init loads it.
func tmpl(t testing.TB) *inventory.Template { return inventorytest.Template(t) }

func loadTemplate(fsys fs.FS) (*inventory.Template, error) {
	return inventory.LoadTemplate(fsys, inventorytest.Schemas())
}
