package talos_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/plugin"
	"github.com/homelab-migrate/migrate/providers/talos"
	"github.com/homelab-migrate/migrate/providers/talos/talosschema"
)

// A run killed after a Talos step changed something, before its Apply
// returned, leaves the step's record running with only what the Apply's
// Intent saved in it. The next run reads the step in flight, adopts it
// when its effect is there, and rollback must then undo it. The provider
// runs as migrate runs it: a plugin program (this test binary, TestMain),
// one process for the killed run and another for the next.

// piped is the provider for the node, in a program of its own.
func (l *lab) piped(t *testing.T, extra map[string]cty.Value) providers.Interface {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := plugin.Factory(plugin.Program{Name: talos.TypeName, Command: exe, Schema: talosschema.Schema, Env: []string{providers.AgeIdentityEnv}})()
	t.Cleanup(func() { _ = p.(providers.Closer).Close() })
	r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "node", Config: l.providerConfig(extra), Dir: l.dir})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	return p
}

// killedAfterTheChange applies the step with the engine's Intent, lets
// the change be made, and keeps of the Apply only what its Intent saved:
// the record a run killed just before the Apply returned leaves (its
// answer never reached the state).
func killedAfterTheChange(t *testing.T, p providers.Interface, typ string, cfg cty.Value) *providers.RevertData {
	t.Helper()
	var saved *providers.RevertData
	var log bytes.Buffer
	r := p.Apply(context.Background(), providers.ApplyRequest{Type: typ, Addr: phases.Address{Type: typ, Name: "node"}, Config: cfg, Log: &log,
		Intent: func(inv providers.RevertData) error { saved = &inv; return nil }})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("apply: %v\n%s", err, log.String())
	}
	return saved
}

// nextRunRollsBack is the next run and its rollback: the in-flight read
// of the running record (Prior as the engine gives it: the revert data
// Intent saved, if any), adopted when Present with the read's revert
// data or else the record's, then the revert of what was adopted.
func nextRunRollsBack(t *testing.T, p providers.Interface, typ string, cfg cty.Value, saved *providers.RevertData) {
	t.Helper()
	ctx := context.Background()
	addr := phases.Address{Type: typ, Name: "node"}
	var prior *providers.Prior
	if saved != nil {
		prior = &providers.Prior{Outputs: cty.EmptyObjectVal, Revert: saved}
	}
	rr := p.Read(ctx, providers.ReadRequest{Type: typ, Addr: addr, Config: cfg, Prior: prior, InFlight: true})
	if err := rr.Diagnostics.Err(); err != nil || rr.Observation != providers.Present {
		t.Fatalf("the in-flight read = %v (%s): %v", rr.Observation, rr.Detail, err)
	}
	revert := saved
	if rr.Revert != nil {
		revert = rr.Revert
	}
	if revert == nil {
		t.Fatalf("%s was adopted done with no revert data: rollback would leave its change in place", addr)
	}
	var log bytes.Buffer
	if rv := p.(providers.Reverter).Revert(ctx, providers.RevertRequest{Type: typ, Addr: addr, Config: cfg, Revert: *revert, Log: &log}); rv.Diagnostics.HasErrors() {
		t.Fatalf("revert (%s): %v\n%s", revert.Description, rv.Diagnostics.Err(), log.String())
	}
}

// TestKubeconfigKilledBeforeApplyReturnedIsRolledBack: the file written,
// the run killed; rollback removes it.
func TestKubeconfigKilledBeforeApplyReturnedIsRolledBack(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if r := apply(ctx, l.provider(t, nil), talos.Bootstrap, cty.EmptyObjectVal, &bytes.Buffer{}); r.Diagnostics.HasErrors() {
		t.Fatal(r.Diagnostics.Err())
	}
	path := filepath.Join(t.TempDir(), "kubeconfig") // in clear: outside the runbook
	cfg := obj(map[string]cty.Value{"path": cty.StringVal(path)})

	saved := killedAfterTheChange(t, l.piped(t, nil), talos.Kubeconfig, cfg)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the kubeconfig was not written: %v", err)
	}
	nextRunRollsBack(t, l.piped(t, nil), talos.Kubeconfig, cfg, saved)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rollback left the kubeconfig: %v", err)
	}
}

// TestUpgradeKilledBeforeApplyReturnedIsRolledBack: the node upgraded,
// the run killed; rollback upgrades it back to what it ran.
func TestUpgradeKilledBeforeApplyReturnedIsRolledBack(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.2")
	cfg := upgradeTo("v1.13.3")
	before, _ := l.n.Boot()

	saved := killedAfterTheChange(t, l.piped(t, nil), talos.Upgrade, cfg)
	if running, _ := l.n.Boot(); running.Version != "v1.13.3" {
		t.Fatalf("the node was not upgraded: it runs %+v", running)
	}
	nextRunRollsBack(t, l.piped(t, nil), talos.Upgrade, cfg, saved)
	if running, _ := l.n.Boot(); running.Version != before.Version || running.Schematic != before.Schematic {
		t.Errorf("after the rollback the node runs %+v, not %+v as before", running, before)
	}
}

// TestConfigKilledBeforeApplyReturnedIsRolledBack: an installed node's
// new config confirmed, the run killed; rollback puts the previous one
// back (it was saved age-encrypted before the change).
func TestConfigKilledBeforeApplyReturnedIsRolledBack(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	before := l.n.PersistedConfig()
	cfg := obj(map[string]cty.Value{
		"patches":     strs("patches/node.yaml"),
		"try_timeout": cty.StringVal("20s"),
		"verify":      verify([]string{"apid"}, nil),
	})

	saved := killedAfterTheChange(t, l.piped(t, nil), talos.MachineConfig, cfg)
	if bytes.Equal(l.n.PersistedConfig(), before) {
		t.Fatal("the node's config did not change")
	}
	if saved != nil {
		// The previous config holds the cluster's secrets: sealed.
		assertNoSecrets(t, "the revert data saved before the change", saved.Description+string(saved.Data), l.bundleSecrets(t))
	}
	nextRunRollsBack(t, l.piped(t, nil), talos.MachineConfig, cfg, saved)
	if !bytes.Equal(l.n.PersistedConfig(), before) {
		t.Error("after the rollback the node does not run its previous config")
	}
}
