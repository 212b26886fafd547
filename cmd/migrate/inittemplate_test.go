package main

import (
	"testing"

	"github.com/homelab-migrate/migrate/examples/homelab"
	"github.com/homelab-migrate/migrate/inventory"
)

// TestInitTemplateLoads: the template migrate init carries loads with
// the registry's schemas and has every role and part init reads (init
// loads it first, before it reads the host).
func TestInitTemplateLoads(t *testing.T) {
	tm, err := inventory.LoadTemplate(homelab.Runbook(), schemas())
	if err != nil {
		t.Fatal(err)
	}
	if got := tm.Step(inventory.RoleServices, "stop"); got != "incus_instance_state.old_services" || tm.PhaseOf(got) != "cleanup" {
		t.Errorf("the services role's stop step = %s (phase %s)", got, tm.PhaseOf(got))
	}
}
