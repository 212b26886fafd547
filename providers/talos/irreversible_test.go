package talos_test

import (
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers/talos"
)

// TestPlanSaysIrreversible: the plan, before anything runs, says that a
// bootstrap cannot be undone, and that a machine config cannot be without
// an age identity (and why); with one it can.
func TestPlanSaysIrreversible(t *testing.T) {
	l := startNode(t, "v1.13.3")
	t.Setenv(talos.IdentityEnv, "")
	p := l.provider(t, map[string]cty.Value{"age_identity": cty.NilVal})
	mc := obj(map[string]cty.Value{"try_timeout": cty.StringVal("20s")})
	r := plan(p, talos.MachineConfig, mc)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Irreversible, talos.IdentityEnv) || !strings.Contains(r.Irreversible, "neither age_identity") {
		t.Errorf("machine config without an identity: Irreversible = %q", r.Irreversible)
	}
	if r := plan(p, talos.Bootstrap, cty.EmptyObjectVal); !strings.Contains(r.Irreversible, "cannot be undone") {
		t.Errorf("bootstrap: Irreversible = %q", r.Irreversible)
	}
	t.Setenv(talos.IdentityEnv, l.id.String())
	p = l.provider(t, map[string]cty.Value{"age_identity": cty.NilVal})
	if r := plan(p, talos.MachineConfig, mc); r.Irreversible != "" || r.Diagnostics.HasErrors() {
		t.Errorf("machine config with an identity: Irreversible = %q (%v)", r.Irreversible, r.Diagnostics.Err())
	}
}
