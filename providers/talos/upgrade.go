package talos

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// upgradeRevert is the Data of an upgrade's revert data: what the node
// ran before, and the installer that puts it back.
type upgradeRevert struct {
	Version    string   `json:"version"`
	Schematic  string   `json:"schematic,omitempty"`
	Extensions []string `json:"extensions,omitempty"`
	// Installer is "" in revert data written before the schematic was
	// recorded: the provider's installer of Version then, checked by
	// version only.
	Installer string `json:"installer,omitempty"`
	// EtcdSnapshots are those taken before the upgrade (etcdsnapshot.go).
	EtcdSnapshots map[string]etcdSnapshot `json:"etcd_snapshots,omitempty"`
}

// Upgrade is the talos_upgrade step type.
const Upgrade = "talos_upgrade"

// upgradeAttrs is a talos_upgrade step.
type upgradeAttrs struct {
	Version  string `cty:"version" required:"true" doc:"The target Talos version, such as \"v1.13.3\"."`
	Preserve bool   `cty:"preserve" doc:"Keep the ephemeral partition's data (the legacy upgrade of a node older than Talos 1.13 only; the LifecycleService always keeps it)."`
}

// upgradeOutputs are a talos_upgrade step's outputs.
type upgradeOutputs struct {
	Version     string `cty:"version"`
	Image       string `cty:"image"`
	SchematicID string `cty:"schematic_id"`
}

var upgradeStep = &sdk.StepType[*Provider, upgradeAttrs, none, upgradeRevert]{
	Name: Upgrade,
	Description: "Upgrades Talos to a target version with the Image Factory installer of the schematic: on Talos 1.13 and later the installer is pulled " +
		"(ImageService.Pull, progress in the log), run by LifecycleService.Upgrade (its output in the log), then the node reboots; an older node takes " +
		"the legacy MachineService.Upgrade. After the reboot the node must run exactly what the runbook pins: the version, the schematic ID and the " +
		"extensions it reports (talosctl get extensions; the \"schematic\" extension carries the ID). A node that booted its other partition " +
		"(the new image did not boot) fails the step, naming what it runs. An etcd snapshot of each control-plane node comes first, kept age-encrypted in etcd-snapshots/ of the state's directory.",
	Rollback: "Upgrades back to exactly what the node ran before (version, schematic and extensions, recorded at apply), verified the same way, first restoring a lost etcd from the snapshot taken before the upgrade.",
	Outputs:  upgradeOutputs{},
	Unknowns: true, // the plan says so when the target is not known
	Validate: func(c *handle, a *upgradeAttrs) phases.Diagnostics {
		if a.Version == "" {
			return missing(c, "version")
		}
		a.Version = "v" + strings.TrimPrefix(a.Version, "v")
		return nil
	},
	Read: func(ctx context.Context, sc *handle, a upgradeAttrs, _ *sdk.Prior[none, upgradeRevert]) sdk.Read[upgradeRevert] {
		if !known(newCall(sc), "version", "preserve") {
			return sdk.Read[upgradeRevert]{Observation: providers.Unknown}
		}
		return readUpgrade(ctx, newCall(sc), a.Version, sc.InFlight)
	},
	Plan: func(ctx context.Context, sc *handle, a upgradeAttrs, _ *sdk.Prior[none, upgradeRevert]) sdk.Plan[none] {
		if !known(newCall(sc), "version", "preserve") {
			return sdk.Plan[none]{Diff: "upgrade Talos (the target is known after earlier steps run)"}
		}
		d, diags := planUpgrade(ctx, newCall(sc), a.Version, a.Preserve)
		return sdk.Plan[none]{Diff: d, Diagnostics: diags}
	},
	Apply:  applyUpgrade,
	Revert: revertUpgrade,
}

// upgradeTarget is what an upgrade installs and what the node must run
// after it.
type upgradeTarget struct {
	want        nodeImage
	installer   string
	versionOnly bool // revert data of an older migrate: no schematic to check
}

// target is the runbook's pin at version.
func (c *call) target(version string) upgradeTarget {
	return upgradeTarget{want: c.pinned(version), installer: c.s.installerImage(version)}
}

// reached says whether a node running got is done.
func (t upgradeTarget) reached(got nodeImage) bool {
	if t.versionOnly {
		return sameVersion(got.Version, t.want.Version)
	}
	return got.matches(t.want)
}

func (c *call) outputs(t upgradeTarget) upgradeOutputs {
	return upgradeOutputs{Version: t.want.Version, Image: t.installer, SchematicID: t.want.Schematic}
}

func readUpgrade(ctx context.Context, c *call, version string, inFlight bool) sdk.Read[upgradeRevert] {
	ns, err := c.p.nodes(ctx)
	if err != nil {
		return sdk.Read[upgradeRevert]{Diagnostics: phases.FromError("Cannot Reach Talos", err)}
	}
	if inFlight {
		// The stopped run may have left the node rebooting into the
		// upgrade: what it runs is known once it answers.
		if err := c.awaitAnswer(ctx, ns, "a run stopped while "+c.addr.String()+" was applied"); err != nil {
			return sdk.Read[upgradeRevert]{Diagnostics: phases.FromError("Cannot Reach Talos", err)}
		}
	}
	if d := c.reachable(ctx); d.HasErrors() {
		return sdk.Read[upgradeRevert]{Diagnostics: d}
	}
	t := c.target(version)
	for _, n := range ns {
		got, err := running(ctx, n)
		if d := c.unreachable(err); d != nil {
			return sdk.Read[upgradeRevert]{Diagnostics: d}
		}
		if err != nil {
			return sdk.Read[upgradeRevert]{Diagnostics: phases.FromError("Cannot Read What Talos Runs", err)}
		}
		if !t.reached(got) {
			return sdk.Read[upgradeRevert]{Observation: providers.Absent, Detail: fmt.Sprintf("node %s runs %s, not %s", n.name, got, t.want)}
		}
	}
	return sdk.Read[upgradeRevert]{Observation: providers.Present, Outputs: c.outputs(t)}
}

func planUpgrade(ctx context.Context, c *call, version string, preserve bool) (string, phases.Diagnostics) {
	t := c.target(version)
	var b strings.Builder
	fmt.Fprintf(&b, "upgrade Talos on %s to %s with %s\n", strings.Join(c.p.targets(), ", "), version, t.installer)
	b.WriteString(c.snapshotPlanLine())
	for _, line := range c.upgradePaths(ctx, preserve) {
		b.WriteString(line + "\n")
	}
	fmt.Fprintf(&b, "then verify that each node came back running %s: a node that booted its other partition fails the step\n", t.want)
	if !sameVersion(version, c.s.version) {
		fmt.Fprintf(&b, "note: the provider pins version = %q; after the upgrade, pin %q so that later configs are rendered for it\n", c.s.version, version)
	}
	if err := checkCompatibility(c.s.k8sVersion, version); err != nil {
		return "", phases.Errorf("Incompatible Versions", "Talos %s does not support Kubernetes %s: %v. Upgrade Kubernetes first or choose another target.", version, c.s.k8sVersion, err)
	}
	return b.String(), nil
}

// upgradePaths says how each node will be upgraded, by the version it
// answers now; when one does not answer, the rule.
func (c *call) upgradePaths(ctx context.Context, preserve bool) []string {
	current := "pull the installer (ImageService.Pull), run it (LifecycleService.Upgrade), then reboot"
	legacy := fmt.Sprintf("the legacy MachineService.Upgrade (preserve = %v), which reboots by itself", preserve)
	rule := []string{"a node on Talos 1.13 or later: " + current + "; an older one: " + legacy}
	ns, err := c.p.nodes(ctx)
	if err != nil || len(ns) == 0 {
		return rule
	}
	var lines []string
	for _, n := range ns {
		vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := n.version(vctx)
		cancel()
		switch {
		case err != nil:
			return rule
		case hasLifecycleAPI(v):
			lines = append(lines, fmt.Sprintf("node %s runs Talos %s: %s", n.name, v, current))
		default:
			lines = append(lines, fmt.Sprintf("node %s runs Talos %s, which has no LifecycleService: %s", n.name, v, legacy))
		}
	}
	return lines
}

func applyUpgrade(ctx context.Context, sc *handle, a upgradeAttrs, _ none, _ *sdk.Prior[none, upgradeRevert]) sdk.Apply[none, upgradeRevert] {
	type result = sdk.Apply[none, upgradeRevert]
	c := newCall(sc)
	t := c.target(a.Version)
	ns, err := c.p.nodes(ctx)
	if err != nil {
		return result{Diagnostics: phases.FromError("Cannot Reach Talos", err)}
	}
	if d := c.reachable(ctx); d.HasErrors() {
		return result{Diagnostics: d}
	}
	var before *nodeImage
	snaps := map[string]etcdSnapshot{}
	for _, n := range ns {
		from, err := running(ctx, n)
		if d := c.unreachable(err); d != nil {
			return result{Diagnostics: d}
		}
		if err != nil {
			return result{Diagnostics: phases.Errorf("Cannot Read What Talos Runs", "Node %s did not say what it runs (needed to upgrade it back on rollback): %v. Nothing was changed.", n.name, err)}
		}
		if before == nil {
			before = &from
		}
		snap, d := c.snapshotBefore(ctx, n)
		if d.HasErrors() {
			return result{Diagnostics: d}
		}
		if snap != nil {
			snaps[n.name] = *snap
		}
		// The way back, in the step's record before the node changes:
		// a run killed during the upgrade (its reboot takes minutes)
		// leaves a record that rollback undoes.
		if err := sdk.Intend(c.Call, c.upgradeBack(t, *before, snaps)); err != nil {
			return result{Diagnostics: phases.Errorf("Cannot Record The Way Back", "%s: what node %s ran (to upgrade it back on rollback) could not be recorded in the state before the upgrade (%v); node %s was not changed.", c.addr, n.name, err, n.name)}
		}
		if d := c.upgrade(ctx, n, from, t, a.Preserve); d.HasErrors() {
			return result{Diagnostics: d}
		}
	}
	if before == nil {
		return result{Outputs: c.outputs(t), Revert: &sdk.RevertData[upgradeRevert]{Description: "nothing to undo: no node was upgraded"}}
	}
	return result{Outputs: c.outputs(t), Revert: c.upgradeBack(t, *before, snaps)}
}

// upgradeBack is the revert data of an upgrade to t of nodes that ran
// before, with the etcd snapshots taken before it.
func (c *call) upgradeBack(t upgradeTarget, before nodeImage, snaps map[string]etcdSnapshot) *sdk.RevertData[upgradeRevert] {
	if t.reached(before) {
		// A reinstall of what ran: there is nothing to go back to.
		return &sdk.RevertData[upgradeRevert]{Description: "nothing to undo: the node ran this version and schematic before"}
	}
	back := upgradeRevert{Version: before.Version, Schematic: before.Schematic, Extensions: before.Extensions, Installer: installerOf(c.s.factoryHost, before), EtcdSnapshots: maps.Clone(snaps)}
	return &sdk.RevertData[upgradeRevert]{Description: fmt.Sprintf("upgrade back to %s (installer %s)", before, back.Installer) + snapshotNote(snaps), Data: back}
}

// installerOf is the installer that puts a node back on what it ran: the
// factory.s for its schematic, the plain one without.
func installerOf(factoryHost string, m nodeImage) string {
	if m.Schematic == "" {
		return "ghcr.io/siderolabs/installer:v" + strings.TrimPrefix(m.Version, "v")
	}
	return installerImage(factoryHost, m.Schematic, m.Version)
}

// upgrade moves one node from what it runs to the target, waits for its
// reboot and verifies what it runs then.
func (c *call) upgrade(ctx context.Context, n node, from nodeImage, t upgradeTarget, preserve bool) phases.Diagnostics {
	c.log.Printf("node %s: upgrading from %s to %s (installer %s)", n.name, from, t.want, t.installer)
	before, err := bootID(ctx, n)
	if err != nil {
		c.log.Printf("node %s: its boot ID cannot be read (%v): the reboot is seen by the node going down instead", n.name, err)
	}
	if d := c.install(ctx, n, from, t, preserve); d.HasErrors() {
		return d
	}
	if err := waitRebooted(ctx, n, before); err != nil {
		c.captureDmesg(ctx, n)
		return phases.Errorf("Upgrade Not Finished", "Node %s did not come back from the upgrade's reboot: %v. It may still be installing or booting: check its console, then read the step again.", n.name, err)
	}
	got, err := running(ctx, n)
	if err != nil {
		return phases.Errorf("Cannot Verify Upgrade", "Node %s came back from the upgrade's reboot but did not say what it runs: %v. Read the step again to verify it.", n.name, err)
	}
	if !t.reached(got) {
		c.captureDmesg(ctx, n)
		return notTaken(n.name, got, t.want, from)
	}
	c.log.Printf("node %s: verified: runs %s", n.name, got)
	return nil
}

// install hands the installer to the node: through the LifecycleService
// where the node's release has it, else the legacy call (which reboots
// by itself).
func (c *call) install(ctx context.Context, n node, from nodeImage, t upgradeTarget, preserve bool) phases.Diagnostics {
	refused := func(err error) phases.Diagnostics {
		c.captureDmesg(ctx, n)
		return phases.Errorf("Upgrade Refused", "Node %s refused the upgrade to %s: %v. Nothing changed: it runs %s. Check that the installer %s exists (talos_image checks it for the pinned version) and that the node reaches its registry.",
			n.name, t.want.Version, err, from, t.installer)
	}
	if !hasLifecycleAPI(from.Version) {
		c.log.Printf("node %s: Talos %s has no LifecycleService: the legacy MachineService.Upgrade", n.name, from.Version)
		uctx, cancel := bounded(ctx)
		defer cancel()
		_, err := n.c.UpgradeWithOptions(n.at(uctx), //nolint:staticcheck // the legacy call, for releases without the LifecycleService only
			client.WithUpgradeImage(t.installer),
			client.WithUpgradePreserve(preserve),
			client.WithUpgradeRebootMode(machineapi.UpgradeRequest_DEFAULT),
		)
		if err != nil {
			return refused(apiErr("Upgrade", err))
		}
		return nil
	}
	if err := c.pullInstaller(ctx, n, t.installer); err != nil {
		return refused(err)
	}
	if err := c.runInstaller(ctx, n, t.installer); err != nil {
		return refused(err)
	}
	rctx, cancel := bounded(ctx)
	defer cancel()
	if err := n.c.Reboot(n.at(rctx)); err != nil {
		return phases.Errorf("Reboot Refused", "Node %s installed %s but refused the reboot that boots it: %v. The new image boots at the node's next reboot (talosctl reboot).", n.name, t.want.Version, apiErr("Reboot", err))
	}
	return nil
}

func revertUpgrade(ctx context.Context, sc *handle, a upgradeAttrs, u sdk.Applied[upgradeRevert]) phases.Diagnostics {
	c, inv := newCall(sc), u.Data
	if inv.Version == "" {
		return nil
	}
	back := upgradeTarget{want: nodeImage{Version: inv.Version, Schematic: inv.Schematic, Extensions: inv.Extensions}, installer: inv.Installer}
	if back.installer == "" {
		back = upgradeTarget{want: nodeImage{Version: inv.Version}, installer: c.s.installerImage(inv.Version), versionOnly: true}
	}
	err := c.p.forNodes(ctx, func(n node) error {
		if u.Resumed {
			// The interrupted revert may have left the node rebooting
			// into its upgrade back.
			if err := c.awaitAnswer(ctx, []node{n}, "the revert of "+c.addr.String()+" resumes"); err != nil {
				return err
			}
		}
		if snap, ok := inv.EtcdSnapshots[n.name]; ok {
			if d := c.restoreIfLost(ctx, n, snap); d.HasErrors() {
				return d.Err()
			}
		}
		got, err := running(ctx, n)
		if err != nil {
			return err
		}
		if back.reached(got) {
			// Put back already (an interrupted revert that finished).
			c.log.Printf("node %s: runs %s already", n.name, got)
			return nil
		}
		if d := c.upgrade(ctx, n, got, back, a.Preserve); d.HasErrors() {
			return d.Err()
		}
		return nil
	})
	if err != nil {
		return phases.FromError("Downgrade Failed", err)
	}
	return nil
}
