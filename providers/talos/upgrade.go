package talos

import (
	"context"
	"fmt"
	"strings"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// upgradeRevert is the Data of an upgrade's revert data.
type upgradeRevert struct {
	Version string `json:"version"`
	// EtcdSnapshots are those taken before the upgrade (etcdsnapshot.go).
	EtcdSnapshots map[string]etcdSnapshot `json:"etcd_snapshots,omitempty"`
}

// Upgrade is the talos_upgrade step type.
const Upgrade = "talos_upgrade"

// upgradeAttrs is a talos_upgrade step.
type upgradeAttrs struct {
	Version  string `cty:"version" required:"true" doc:"The target Talos version, such as \"v1.13.3\"."`
	Preserve bool   `cty:"preserve" doc:"Keep the ephemeral partition's data."`
}

// upgradeOutputs are a talos_upgrade step's outputs.
type upgradeOutputs struct {
	Version string `cty:"version"`
	Image   string `cty:"image"`
}

var upgradeStep = &sdk.StepType[*Provider, upgradeAttrs, none, upgradeRevert]{
	Name:        Upgrade,
	Description: "Upgrades Talos to a target version with the Image Factory installer of the schematic, and waits until the node runs it. An etcd snapshot of each control-plane node comes first, kept age-encrypted in etcd-snapshots/ of the state's directory.",
	Rollback:    "Upgrades back to the previous version, first restoring a lost etcd from the snapshot taken before the upgrade.",
	Outputs:     upgradeOutputs{},
	Unknowns:    true, // the plan says so when the target is not known
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
		return readUpgrade(ctx, newCall(sc), a.Version)
	},
	Plan: func(_ context.Context, sc *handle, a upgradeAttrs, _ *sdk.Prior[none, upgradeRevert]) sdk.Plan[none] {
		if !known(newCall(sc), "version", "preserve") {
			return sdk.Plan[none]{Diff: "upgrade Talos (the target is known after earlier steps run)"}
		}
		d, diags := planUpgrade(newCall(sc), a.Version, a.Preserve)
		return sdk.Plan[none]{Diff: d, Diagnostics: diags}
	},
	Apply:  applyUpgrade,
	Revert: revertUpgrade,
}

func readUpgrade(ctx context.Context, c *call, target string) sdk.Read[upgradeRevert] {
	ns, err := c.p.nodes(ctx)
	if err != nil {
		return sdk.Read[upgradeRevert]{Diagnostics: phases.FromError("Cannot Reach Talos", err)}
	}
	if d := c.reachable(ctx); d.HasErrors() {
		return sdk.Read[upgradeRevert]{Diagnostics: d}
	}
	for _, n := range ns {
		v, err := n.version(ctx)
		if d := c.unreachable(err); d != nil {
			return sdk.Read[upgradeRevert]{Diagnostics: d}
		}
		if err != nil {
			return sdk.Read[upgradeRevert]{Diagnostics: phases.FromError("Cannot Read Talos Version", err)}
		}
		if !sameVersion(v, target) {
			return sdk.Read[upgradeRevert]{Observation: providers.Absent, Detail: fmt.Sprintf("node %s runs %s, not %s", n.name, v, target)}
		}
	}
	return sdk.Read[upgradeRevert]{Observation: providers.Present, Outputs: upgradeOutputs{Version: target, Image: c.s.installerImage(target)}}
}

func planUpgrade(c *call, target string, preserve bool) (string, phases.Diagnostics) {
	var b strings.Builder
	fmt.Fprintf(&b, "upgrade Talos on %s to %s with %s (preserve = %v), then wait until the node runs %s\n", strings.Join(c.p.targets(), ", "), target, c.s.installerImage(target), preserve, target)
	b.WriteString(c.snapshotPlanLine())
	if !sameVersion(target, c.s.version) {
		fmt.Fprintf(&b, "note: the provider pins version = %q; after the upgrade, pin %q so that later configs are rendered for it\n", c.s.version, target)
	}
	if err := checkCompatibility(c.s.k8sVersion, target); err != nil {
		return "", phases.Errorf("Incompatible Versions", "Talos %s does not support Kubernetes %s: %v. Upgrade Kubernetes first or choose another target.", target, c.s.k8sVersion, err)
	}
	return b.String(), nil
}

func applyUpgrade(ctx context.Context, sc *handle, a upgradeAttrs, _ none, _ *sdk.Prior[none, upgradeRevert]) sdk.Apply[none, upgradeRevert] {
	type result = sdk.Apply[none, upgradeRevert]
	c, target, preserve := newCall(sc), a.Version, a.Preserve
	ns, err := c.p.nodes(ctx)
	if err != nil {
		return result{Diagnostics: phases.FromError("Cannot Reach Talos", err)}
	}
	if d := c.reachable(ctx); d.HasErrors() {
		return result{Diagnostics: d}
	}
	var from string
	snaps := map[string]etcdSnapshot{}
	for _, n := range ns {
		v, err := n.version(ctx)
		if d := c.unreachable(err); d != nil {
			return result{Diagnostics: d}
		}
		if err != nil {
			return result{Diagnostics: phases.Errorf("Cannot Read Talos Version", "Node %s did not answer its version: %v.", n.name, err)}
		}
		if from == "" {
			from = v
		}
		snap, d := c.snapshotBefore(ctx, n)
		if d.HasErrors() {
			return result{Diagnostics: d}
		}
		if snap != nil {
			snaps[n.name] = *snap
		}
		if d := c.upgrade(ctx, n, v, target, preserve); d.HasErrors() {
			return result{Diagnostics: d}
		}
	}
	out := upgradeOutputs{Version: target, Image: c.s.installerImage(target)}
	if sameVersion(from, target) {
		// A reinstall of the same version: there is nothing to go back to.
		return result{Outputs: out, Revert: &sdk.RevertData[upgradeRevert]{Description: "nothing to undo: the node ran this version before"}}
	}
	return result{
		Outputs: out,
		Revert: &sdk.RevertData[upgradeRevert]{
			Description: fmt.Sprintf("upgrade Talos back to %s (with the installer %s)", from, c.s.installerImage(from)) + snapshotNote(snaps),
			Data:        upgradeRevert{Version: from, EtcdSnapshots: snaps},
		},
	}
}

// upgrade moves one node to the target version and waits for it.
func (c *call) upgrade(ctx context.Context, n node, from, target string, preserve bool) phases.Diagnostics {
	image := c.s.installerImage(target)
	c.log.Printf("node %s: upgrading Talos %s -> %s with %s", n.name, from, target, image)
	uctx, cancel := bounded(ctx)
	_, err := n.c.UpgradeWithOptions(n.at(uctx),
		client.WithUpgradeImage(image),
		client.WithUpgradePreserve(preserve),
		client.WithUpgradeRebootMode(machineapi.UpgradeRequest_DEFAULT),
	)
	cancel()
	if err != nil {
		c.captureDmesg(ctx, n)
		return phases.Errorf("Upgrade Refused", "Node %s refused the upgrade to %s: %v.", n.name, target, apiErr("Upgrade", err))
	}
	if sameVersion(from, target) {
		// The version cannot tell the reinstall from the old system: wait
		// for the reboot to take the node down first.
		if !waitDown(ctx, n, 30*time.Second) {
			c.log.Printf("node %s: did not go down within 30s for the reinstall of %s; it may still be installing", n.name, target)
		}
	}
	if err := waitVersion(ctx, n, target); err != nil {
		c.captureDmesg(ctx, n)
		return phases.Errorf("Upgrade Not Finished", "Node %s did not come back on Talos %s: %v.", n.name, target, err)
	}
	c.log.Printf("node %s: runs Talos %s", n.name, target)
	return nil
}

func revertUpgrade(ctx context.Context, sc *handle, a upgradeAttrs, u sdk.Applied[upgradeRevert]) phases.Diagnostics {
	c, inv, preserve := newCall(sc), u.Data, a.Preserve
	if inv.Version == "" {
		return nil
	}
	err := c.p.forNodes(ctx, func(n node) error {
		if snap, ok := inv.EtcdSnapshots[n.name]; ok {
			if d := c.restoreIfLost(ctx, n, snap); d.HasErrors() {
				return d.Err()
			}
		}
		v, err := n.version(ctx)
		if err != nil {
			return err
		}
		if u.Resumed && sameVersion(v, inv.Version) {
			// Downgraded by the interrupted revert: not another reinstall.
			c.log.Printf("node %s: runs Talos %s already", n.name, v)
			return nil
		}
		if d := c.upgrade(ctx, n, v, inv.Version, preserve); d.HasErrors() {
			return d.Err()
		}
		return nil
	})
	if err != nil {
		return phases.FromError("Downgrade Failed", err)
	}
	return nil
}
