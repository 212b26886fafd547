package incus

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// snapshotSpec is an incus_snapshot step.
type snapshotSpec struct {
	Instance string `cty:"instance" required:"true" doc:"The instance name."`
	Name     string `cty:"name" required:"true" doc:"The snapshot name."`
	Action   string `cty:"action" doc:"\"create\" (default; rollback deletes it), \"restore\" or \"delete\" (irreversible)."`
	Before   bool   `cty:"snapshot_before" doc:"With action = \"restore\": take a snapshot first, so that rollback can restore it; without it a restore cannot be undone."`
}

// snapshotOut is the outputs of an incus_snapshot step.
type snapshotOut struct {
	Instance string `cty:"instance"`
	Name     string `cty:"name"`
	Before   string `cty:"before"`
}

type (
	snapPrior = *sdk.Prior[struct{}, snapshotRevert]
	snapApply = sdk.Apply[struct{}, snapshotRevert]
	snapRead  = sdk.Read[snapshotRevert]
	snapPlan  = sdk.Plan[struct{}]
)

// Snapshot is the name of the incus_snapshot step type.
const Snapshot = "incus_snapshot"

var snapshotStep = &sdk.StepType[*conn, snapshotSpec, struct{}, snapshotRevert]{
	Name:        Snapshot,
	Description: "Creates, restores or deletes a named snapshot of an instance.",
	Rollback:    "Deletes a snapshot it created; a restore with snapshot_before restores the snapshot taken first; a deletion cannot be undone.",
	Outputs:     snapshotOut{},
	Validate:    validateSnapshot,
	Read:        readSnapshot,
	Plan:        planSnapshot,
	Apply:       applySnapshot,
	Revert:      revertSnapshot,
}

func validateSnapshot(c *call, s *snapshotSpec) phases.Diagnostics {
	var diags phases.Diagnostics
	s.Action = orDefault(s.Action, "create")
	for _, a := range [][2]string{{"instance", s.Instance}, {"name", s.Name}} {
		if a[1] == "" {
			diags = append(diags, errorf("Missing Required Attribute", "The %q attribute of %s is required.", a[0], c.Addr)...)
		}
	}
	if strings.Contains(s.Name, "/") {
		diags = append(diags, errorf("Invalid Attribute Value", "The snapshot name %q of %s may not contain \"/\".", s.Name, c.Addr)...)
	}
	switch s.Action {
	case "create", "restore", "delete":
	default:
		diags = append(diags, errorf("Invalid Attribute Value", "The \"action\" attribute of %s must be \"create\", \"restore\" or \"delete\", not %q.", c.Addr, s.Action)...)
	}
	if s.Before && s.Action != "restore" {
		diags = append(diags, warning("Attribute Ignored", "snapshot_before of %s only applies with action = \"restore\".", c.Addr)...)
	}
	return diags
}

// snapshotRevert is how to undo an incus_snapshot step.
type snapshotRevert struct {
	Op       string `json:"op"` // "delete" (a created snapshot), "restore" (the one taken before a restore)
	Instance string `json:"instance,omitempty"`
	Snapshot string `json:"snapshot,omitempty"`
}

func outputsOf(s snapshotSpec, before string) snapshotOut {
	return snapshotOut{s.Instance, s.Name, before}
}

func planSnapshot(ctx context.Context, c *call, s snapshotSpec, _ snapPrior) snapPlan {
	inst, d := existing(ctx, c, s.Instance, planHint)
	if d != nil {
		return snapPlan{Diagnostics: d}
	}
	exists, err := hasSnapshot(ctx, c, s.Instance, s.Name)
	if err != nil {
		return snapPlan{Diagnostics: apiErr(c, "Cannot List Snapshots", err)}
	}
	switch s.Action {
	case "create":
		if exists {
			return snapPlan{Diff: fmt.Sprintf("snapshot %s of instance %q already exists: nothing to do (rollback keeps it)", s.Name, s.Instance)}
		}
		return snapPlan{Diff: fmt.Sprintf("+ snapshot %s of instance %q (%s)\n  rollback: delete the snapshot", s.Name, s.Instance, strings.ToLower(inst.Status))}
	case "restore":
		var b strings.Builder
		if s.Before {
			fmt.Fprintf(&b, "+ snapshot %s of instance %q first\n", snapshotName(c.Addr, time.Now())+"-before", s.Instance)
		}
		fmt.Fprintf(&b, "~ restore instance %q to snapshot %s", s.Instance, s.Name)
		if inst.Status == "Running" {
			b.WriteString(" (the daemon stops it, restores, and starts it again)")
		}
		if s.Before {
			b.WriteString("\n  rollback: restore the snapshot taken first")
		} else {
			b.WriteString("\n  irreversible: without snapshot_before = true the state before the restore is lost")
		}
		r := snapPlan{Diff: b.String()}
		if !s.Before {
			r.Irreversible = "without snapshot_before = true the state before the restore is lost"
		}
		if !exists {
			r.Diagnostics = warning("Snapshot Not Found Yet", "%s restores snapshot %s of instance %s, which does not exist now; an earlier step must create it, or the step fails.", c.Addr, s.Name, s.Instance)
		}
		return r
	default: // delete
		if !exists {
			return snapPlan{Diff: fmt.Sprintf("snapshot %s of instance %q is already absent: nothing to do", s.Name, s.Instance)}
		}
		return snapPlan{Diff: fmt.Sprintf("- delete snapshot %s of instance %q\n  irreversible: a deleted snapshot cannot be brought back", s.Name, s.Instance),
			Irreversible: "a deleted snapshot cannot be brought back"}
	}
}

func readSnapshot(ctx context.Context, c *call, s snapshotSpec, prior snapPrior) snapRead {
	inst, _, err := getInstance(ctx, c, s.Instance)
	if err != nil {
		return snapRead{Diagnostics: apiErr(c, "Cannot Read Instance", err)}
	}
	if inst == nil {
		return snapRead{Observation: providers.Absent, Detail: fmt.Sprintf("instance %q does not exist", s.Instance)}
	}
	exists, err := hasSnapshot(ctx, c, s.Instance, s.Name)
	if err != nil {
		return snapRead{Diagnostics: apiErr(c, "Cannot List Snapshots", err)}
	}
	prev := func() any {
		if prior != nil && prior.Outputs != cty.NilVal && !prior.Outputs.IsNull() {
			return prior.Outputs
		}
		return outputsOf(s, "")
	}
	switch s.Action {
	case "create":
		if exists {
			r := snapRead{Observation: providers.Present, Outputs: prev()}
			if prior == nil {
				// Adopted: migrate cannot tell whether it made it, so
				// rollback keeps it.
				r.Revert = &sdk.RevertData[snapshotRevert]{Description: fmt.Sprintf("nothing to undo: snapshot %s is kept", s.Name), Data: snapshotRevert{Op: "none"}}
			}
			return r
		}
		if prior != nil {
			return snapRead{Observation: providers.Drifted, Detail: fmt.Sprintf("snapshot %s of instance %q is gone", s.Name, s.Instance)}
		}
		return snapRead{Observation: providers.Absent}
	case "delete":
		if !exists {
			return snapRead{Observation: providers.Present, Outputs: prev()}
		}
		if prior != nil {
			return snapRead{Observation: providers.Drifted, Detail: fmt.Sprintf("snapshot %s of instance %q exists again", s.Name, s.Instance)}
		}
		return snapRead{Observation: providers.Absent}
	default: // restore: an action, not a state; done once it completed
		if prior != nil {
			return snapRead{Observation: providers.Present, Outputs: prev()}
		}
		return snapRead{Observation: providers.Absent}
	}
}

func applySnapshot(ctx context.Context, c *call, s snapshotSpec, _ struct{}, _ snapPrior) snapApply {
	_, d := existing(ctx, c, s.Instance, "")
	if d != nil {
		return snapApply{Diagnostics: d}
	}
	exists, err := hasSnapshot(ctx, c, s.Instance, s.Name)
	if err != nil {
		return snapApply{Diagnostics: apiErr(c, "Cannot List Snapshots", err)}
	}
	start := time.Now()
	switch s.Action {
	case "create":
		if exists {
			logf(c, "snapshot %s of instance %s already exists: nothing to do; rollback keeps it", s.Name, s.Instance)
			return snapApply{Outputs: outputsOf(s, ""), Revert: &sdk.RevertData[snapshotRevert]{Description: fmt.Sprintf("nothing to undo: snapshot %s existed already", s.Name), Data: snapshotRevert{Op: "none"}}}
		}
		if err := c.Settings.c.CreateSnapshot(ctx, s.Instance, s.Name, false); err != nil {
			return snapApply{Diagnostics: apiErr(c, "Cannot Create Snapshot", err)}
		}
		logf(c, "snapshot %s of instance %s created in %s", s.Name, s.Instance, time.Since(start).Round(time.Millisecond))
		return snapApply{
			Outputs: outputsOf(s, ""),
			Revert:  &sdk.RevertData[snapshotRevert]{Description: fmt.Sprintf("delete snapshot %s of instance %s", s.Name, s.Instance), Data: snapshotRevert{Op: "delete", Instance: s.Instance, Snapshot: s.Name}},
		}
	case "restore":
		if !exists {
			return snapApply{Diagnostics: phases.Errorf("Unknown Snapshot", "%s: instance %s has no snapshot %s (see `incus snapshot list %s`).", c.Addr, s.Instance, s.Name, s.Instance)}
		}
		before := ""
		if s.Before {
			if before, err = freeSnapshotName(ctx, c, s.Instance, snapshotName(c.Addr, time.Now())+"-before"); err != nil {
				return snapApply{Diagnostics: apiErr(c, "Cannot List Snapshots", err)}
			}
			if err := c.Settings.c.CreateSnapshot(ctx, s.Instance, before, false); err != nil {
				return snapApply{Diagnostics: apiErr(c, "Cannot Create Snapshot", err)}
			}
			logf(c, "snapshot %s of instance %s taken before the restore", before, s.Instance)
		}
		if err := c.Settings.c.RestoreSnapshot(ctx, s.Instance, s.Name); err != nil {
			return snapApply{Diagnostics: apiErr(c, "Cannot Restore Snapshot", err)}
		}
		logf(c, "instance %s restored to snapshot %s in %s", s.Instance, s.Name, time.Since(start).Round(time.Millisecond))
		r := snapApply{Outputs: outputsOf(s, before)}
		if before != "" {
			r.Revert = &sdk.RevertData[snapshotRevert]{Description: fmt.Sprintf("restore instance %s to snapshot %s, taken before the restore", s.Instance, before), Data: snapshotRevert{Op: "restore", Instance: s.Instance, Snapshot: before}}
		} else {
			logf(c, "this restore cannot be undone: snapshot_before was not set")
		}
		return r
	default: // delete
		if !exists {
			logf(c, "snapshot %s of instance %s is already absent", s.Name, s.Instance)
			return snapApply{Outputs: outputsOf(s, "")}
		}
		if err := c.Settings.c.DeleteSnapshot(ctx, s.Instance, s.Name); err != nil {
			return snapApply{Diagnostics: apiErr(c, "Cannot Delete Snapshot", err)}
		}
		logf(c, "snapshot %s of instance %s deleted; this cannot be undone", s.Name, s.Instance)
		return snapApply{Outputs: outputsOf(s, "")}
	}
}

func revertSnapshot(ctx context.Context, c *call, a snapshotSpec, u sdk.Applied[snapshotRevert]) phases.Diagnostics {
	inv := u.Data
	name := pick(inv.Instance, a.Instance)
	switch inv.Op {
	case "none":
		return nil
	case "delete":
		snap := pick(inv.Snapshot, a.Name)
		exists, err := hasSnapshot(ctx, c, name, snap)
		if err != nil {
			if incusapi.IsNotFound(err) {
				logf(c, "instance %s is gone, and its snapshots with it", name)
				return nil
			}
			return apiErr(c, "Cannot List Snapshots", err)
		}
		if !exists {
			logf(c, "snapshot %s of instance %s is already gone", snap, name)
			return nil
		}
		if err := c.Settings.c.DeleteSnapshot(ctx, name, snap); err != nil {
			return apiErr(c, "Cannot Delete Snapshot", err)
		}
		logf(c, "snapshot %s of instance %s deleted", snap, name)
	case "restore":
		if err := c.Settings.c.RestoreSnapshot(ctx, name, inv.Snapshot); err != nil {
			return apiErr(c, "Cannot Restore Snapshot", err)
		}
		logf(c, "instance %s restored to snapshot %s", name, inv.Snapshot)
	default:
		return phases.Errorf("Invalid Revert", "The revert data of %s has an unknown operation %q.", c.Addr, inv.Op)
	}
	return nil
}
