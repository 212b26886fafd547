package talos_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/local"
	"github.com/homelab-migrate/migrate/providers/talos"
	"github.com/homelab-migrate/migrate/runbooks"
)

// TestFixtureRunbook loads testdata/runbook against the provider's schema:
// it must give no diagnostics, and its patch is the brief's.
func TestFixtureRunbook(t *testing.T) {
	t.Parallel()
	dir, err := filepath.Abs("testdata/runbook")
	if err != nil {
		t.Fatal(err)
	}
	ld := runbooks.NewLoader(os.DirFS(dir), runbooks.Options{
		Dir:     dir,
		Schemas: map[string]phases.Schema{"talos": talos.New().Schema(), "local": local.New().Schema()},
	})
	rb, diags := ld.Load()
	if diags.HasErrors() {
		t.Fatalf("the fixture runbook has errors: %v", diags)
	}
	if rb == nil || len(rb.Phases) != 1 {
		t.Fatalf("runbook = %+v", rb)
	}
	patch, err := os.ReadFile(filepath.Join(dir, "patches/node.yaml"))
	if err != nil || string(patch) != briefPatch {
		t.Errorf("testdata/runbook/patches/node.yaml is not the brief's patch (%v)", err)
	}
}
