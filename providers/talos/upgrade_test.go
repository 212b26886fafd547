package talos_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/lab/talosnode"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/talos"
)

// i915Schematic is the provider block's schematic (extensions = i915).
var i915Schematic = talos.ExtensionsSchematicID("siderolabs/i915")

func upgradeTo(version string) cty.Value {
	return obj(map[string]cty.Value{"version": cty.StringVal(version)})
}

// wantAll fails unless s holds every one of want.
func wantAll(t *testing.T, what, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, s)
		}
	}
}

// TestUpgradeThroughLifecycleIsVerified: a 1.13 node is upgraded the
// current way (pull, LifecycleService.Upgrade, reboot), and the step's
// log says what the node runs after the reboot.
func TestUpgradeThroughLifecycleIsVerified(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.2")
	p := l.provider(t, nil)
	ctx := context.Background()

	pr := plan(p, talos.Upgrade, upgradeTo("v1.13.3"))
	if err := pr.Diagnostics.Err(); err != nil {
		t.Fatal(err)
	}
	wantAll(t, "plan", pr.Diff, "node 127.0.0.1 runs Talos v1.13.2: pull the installer (ImageService.Pull), run it (LifecycleService.Upgrade), then reboot", "verify that each node came back running Talos v1.13.3 with schematic "+i915Schematic[:12], "extensions i915", "other partition")

	var log bytes.Buffer
	r := apply(ctx, p, talos.Upgrade, upgradeTo("v1.13.3"), &log)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("upgrade: %v\n%s", err, log.String())
	}
	t.Logf("the step's log:\n%s", log.String())
	wantAll(t, "log", log.String(),
		"pulling factory.talos.dev/metal-installer/"+i915Schematic+":v1.13.3", "pulled factory.talos.dev/metal-installer/"+i915Schematic+"@sha256:",
		"installer: installed Talos v1.13.3 to boot entry B",
		"verified: runs Talos v1.13.3 with schematic "+i915Schematic[:12]+"… (extensions i915)")
	if strings.Contains(log.String(), "legacy") {
		t.Errorf("a 1.13 node took the legacy call:\n%s", log.String())
	}
	if got := r.Outputs.GetAttr("schematic_id").AsString(); got != i915Schematic {
		t.Errorf("schematic_id output %q", got)
	}
	if running, _ := l.n.Boot(); running.Partition != "B" || running.Version != "v1.13.3" || running.Schematic != i915Schematic {
		t.Errorf("the node runs %+v", running)
	}
	// Read sees the verified upgrade as done.
	addr := phases.Address{Type: talos.Upgrade, Name: "node"}
	if rr := p.Read(ctx, providers.ReadRequest{Type: talos.Upgrade, Addr: addr, Config: upgradeTo("v1.13.3"), Prior: &providers.Prior{}}); rr.Observation != providers.Present {
		t.Errorf("Read after upgrade = %v (%s)", rr.Observation, rr.Detail)
	}
}

// TestUpgradeThatFellBackFailsTheStep: the new partition does not boot,
// the node comes back healthy on the old one, and the step fails naming
// what the node runs and what did not take.
func TestUpgradeThatFellBackFailsTheStep(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.2")
	p := l.provider(t, nil)
	ctx := context.Background()
	configBefore := string(l.n.PersistedConfig())

	l.n.FallBackAtNextUpgrade()
	var log bytes.Buffer
	r := apply(ctx, p, talos.Upgrade, upgradeTo("v1.13.3"), &log)
	if !r.Diagnostics.HasErrors() {
		t.Fatalf("an upgrade that fell back to the other partition passed:\n%s", log.String())
	}
	d := r.Diagnostics[0]
	if d.Summary != "Upgrade Did Not Take" {
		t.Fatalf("diagnostic %q: %s", d.Summary, d.Detail)
	}
	wantAll(t, "diagnostic", d.Detail, "Node 127.0.0.1 came back running Talos v1.13.2 with schematic none (no extensions): it booted the other partition, so the upgrade to Talos v1.13.3 with schematic "+i915Schematic[:12]+"… (extensions i915) did not take",
		"Nothing else changed", `version = "v1.13.2"`)
	wantAll(t, "log", log.String(), "failed to boot") // the node's kernel log, captured
	if r.Revert != nil {
		t.Errorf("a failed upgrade left revert data: %+v", r.Revert)
	}
	if l.n.Version() != "v1.13.2" || string(l.n.PersistedConfig()) != configBefore {
		t.Errorf("the node changed: %s", l.n.Version())
	}
	addr := phases.Address{Type: talos.Upgrade, Name: "node"}
	if rr := p.Read(ctx, providers.ReadRequest{Type: talos.Upgrade, Addr: addr, Config: upgradeTo("v1.13.3"), Prior: &providers.Prior{}}); rr.Observation != providers.Absent || !strings.Contains(rr.Detail, "runs Talos v1.13.2") {
		t.Errorf("Read after the fallback = %v (%s)", rr.Observation, rr.Detail)
	}
}

// TestUpgradeOfAnOlderReleaseTakesTheLegacyCall: Talos 1.12 has no
// LifecycleService; MachineService.Upgrade still upgrades it, verified.
func TestUpgradeOfAnOlderReleaseTakesTheLegacyCall(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.12.6")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bootstrapDirect(ctx, t, l.n) // the legacy call checks etcd first

	p := l.provider(t, nil)
	pr := plan(p, talos.Upgrade, upgradeTo("v1.13.3"))
	if err := pr.Diagnostics.Err(); err != nil {
		t.Fatal(err)
	}
	wantAll(t, "plan", pr.Diff, "node 127.0.0.1 runs Talos v1.12.6, which has no LifecycleService: the legacy MachineService.Upgrade")
	var log bytes.Buffer
	r := apply(ctx, p, talos.Upgrade, upgradeTo("v1.13.3"), &log)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("upgrade: %v\n%s", err, log.String())
	}
	wantAll(t, "log", log.String(), "Talos v1.12.6 has no LifecycleService: the legacy MachineService.Upgrade",
		"verified: runs Talos v1.13.3 with schematic "+i915Schematic[:12])
	if strings.Contains(log.String(), "pulling") {
		t.Errorf("a 1.12 node was asked to pull:\n%s", log.String())
	}
}

// bootstrapDirect bootstraps the node as talosctl would (the provider
// refuses a release older than 1.13).
func bootstrapDirect(ctx context.Context, t *testing.T, n *talosnode.Node) {
	t.Helper()
	cfg, err := clientconfig.Open(n.TalosconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(ctx, client.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck
	if err = c.Bootstrap(ctx, &machineapi.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}
}

// TestUpgradeRollbackReturnsToTheRecordedImage: the revert data records
// the version and schematic the node ran; rollback installs exactly that
// and verifies it.
func TestUpgradeRollbackReturnsToTheRecordedImage(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.2")
	ctx := context.Background()
	// The node runs a schematic of its own first: none of the pin's
	// extensions (a reinstall of its version with another schematic).
	plain := l.provider(t, map[string]cty.Value{"extensions": cty.ListValEmpty(cty.String), "version": cty.StringVal("v1.13.2")})
	plainID := talos.ExtensionsSchematicID()
	if r := apply(ctx, plain, talos.Upgrade, upgradeTo("v1.13.2"), &bytes.Buffer{}); r.Diagnostics.HasErrors() {
		t.Fatal(r.Diagnostics.Err())
	}

	p := l.provider(t, nil)
	var log bytes.Buffer
	r := apply(ctx, p, talos.Upgrade, upgradeTo("v1.13.3"), &log)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("upgrade: %v\n%s", err, log.String())
	}
	if r.Revert == nil {
		t.Fatal("no revert data")
	}
	wantAll(t, "revert description", r.Revert.Description, "back to Talos v1.13.2 with schematic "+plainID[:12], "metal-installer/"+plainID+":v1.13.2")

	addr := phases.Address{Type: talos.Upgrade, Name: "node"}
	log.Reset()
	if rv := p.Revert(ctx, providers.RevertRequest{Type: talos.Upgrade, Addr: addr, Config: upgradeTo("v1.13.3"), Revert: *r.Revert, Log: &log}); rv.Diagnostics.HasErrors() {
		t.Fatalf("revert: %v\n%s", rv.Diagnostics.Err(), log.String())
	}
	running, _ := l.n.Boot()
	if running.Version != "v1.13.2" || running.Schematic != plainID {
		t.Errorf("after the rollback the node runs %+v", running)
	}
	wantAll(t, "revert log", log.String(), "verified: runs Talos v1.13.2 with schematic "+plainID[:12])
}
