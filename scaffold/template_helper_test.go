package scaffold_test

import (
	"testing"

	"github.com/homelab-migrate/migrate/inventory"
	"github.com/homelab-migrate/migrate/inventory/inventorytest"
)

// schemas are migrate's providers' schemas, as cmd/migrate's registry has
// them.
var schemas = inventorytest.Schemas

// tmpl is examples/homelab as migrate init loads it.
func tmpl(t testing.TB) *inventory.Template { return inventorytest.Template(t) }
