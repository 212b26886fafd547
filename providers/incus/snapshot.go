package incus

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

// snapshotSpec is an incus_snapshot step, decoded.
type snapshotSpec struct {
	instance, name, action string
	before                 bool
	known                  bool
}

func (c *call) decodeSnapshot() snapshotSpec {
	s := snapshotSpec{known: c.known()}
	k := func(ok bool) {
		if !ok {
			s.known = false
		}
	}
	var ok bool
	s.instance, ok = c.str("instance", "")
	k(ok)
	s.name, ok = c.str("name", "")
	k(ok)
	s.action, ok = c.str("action", "create")
	k(ok)
	s.before, ok = c.boolean("snapshot_before", false)
	k(ok)
	if !c.known() {
		return s
	}
	for _, a := range []string{"instance", "name"} {
		if v := c.get(a); v.IsKnown() && (v.IsNull() || v.Type() == cty.String && v.AsString() == "") {
			c.errorf("Missing Required Attribute", "The %q attribute of %s is required.", a, c.what)
		}
	}
	if v := c.get("name"); v.IsKnown() && strings.Contains(s.name, "/") {
		c.errorf("Invalid Attribute Value", "The snapshot name %q of %s may not contain \"/\".", s.name, c.what)
	}
	if v := c.get("action"); v.IsKnown() {
		switch s.action {
		case "create", "restore", "delete":
		default:
			c.errorf("Invalid Attribute Value", "The \"action\" attribute of %s must be \"create\", \"restore\" or \"delete\", not %q.", c.what, s.action)
		}
	}
	if s.before && s.action != "restore" {
		c.diags = append(c.diags, phases.Diagnostic{Severity: phases.Warning, Summary: "Attribute Ignored",
			Detail: fmt.Sprintf("snapshot_before of %s only applies with action = \"restore\".", c.what)})
	}
	return s
}

// snapshotInverse is how to undo an incus_snapshot step.
type snapshotInverse struct {
	Op       string `json:"op"` // "delete" (a created snapshot), "restore" (the one taken before a restore)
	Instance string `json:"instance,omitempty"`
	Snapshot string `json:"snapshot,omitempty"`
}

func snapshotOutputs(s snapshotSpec, before string) cty.Value {
	return cty.ObjectVal(map[string]cty.Value{
		"instance": cty.StringVal(s.instance),
		"name":     cty.StringVal(s.name),
		"before":   cty.StringVal(before),
	})
}

func (c *call) planSnapshot(ctx context.Context, req providers.PlanRequest) providers.PlanResponse {
	s := c.decodeSnapshot()
	if c.diags.HasErrors() {
		return providers.PlanResponse{}
	}
	if !s.known {
		return providers.PlanResponse{Diff: fmt.Sprintf("%s a snapshot (its instance or name is known after earlier steps run)", firstNonEmpty(s.action, "create"))}
	}
	inst, _, err := c.getInstance(ctx, s.instance)
	if err != nil {
		return providers.PlanResponse{Diagnostics: c.apiErr("Cannot Read Instance", err)}
	}
	if inst == nil {
		return providers.PlanResponse{Diagnostics: c.unknownInstance(s.instance, " If an earlier step creates it, refer to that step's output (instance = incus_instance.NAME.name) so that the plan waits for it.")}
	}
	exists, err := c.hasSnapshot(ctx, s.instance, s.name)
	if err != nil {
		return providers.PlanResponse{Diagnostics: c.apiErr("Cannot List Snapshots", err)}
	}
	switch s.action {
	case "create":
		if exists {
			return providers.PlanResponse{Diff: fmt.Sprintf("snapshot %s of instance %q already exists: nothing to do (rollback keeps it)", s.name, s.instance)}
		}
		return providers.PlanResponse{Diff: fmt.Sprintf("+ snapshot %s of instance %q (%s)\n  rollback: delete the snapshot", s.name, s.instance, strings.ToLower(inst.Status))}
	case "restore":
		var b strings.Builder
		if s.before {
			fmt.Fprintf(&b, "+ snapshot %s of instance %q first\n", snapshotName(c.addr, time.Now())+"-before", s.instance)
		}
		fmt.Fprintf(&b, "~ restore instance %q to snapshot %s", s.instance, s.name)
		if inst.Status == "Running" {
			b.WriteString(" (the daemon stops it, restores, and starts it again)")
		}
		if s.before {
			b.WriteString("\n  rollback: restore the snapshot taken first")
		} else {
			b.WriteString("\n  irreversible: without snapshot_before = true the state before the restore is lost")
		}
		r := providers.PlanResponse{Diff: b.String()}
		if !s.before {
			r.Irreversible = "without snapshot_before = true the state before the restore is lost"
		}
		if !exists {
			r.Diagnostics = phases.Diagnostics{{Severity: phases.Warning, Summary: "Snapshot Not Found Yet",
				Detail: fmt.Sprintf("%s restores snapshot %s of instance %s, which does not exist now; an earlier step must create it, or the step fails.", c.addr, s.name, s.instance)}}
		}
		return r
	default: // delete
		if !exists {
			return providers.PlanResponse{Diff: fmt.Sprintf("snapshot %s of instance %q is already absent: nothing to do", s.name, s.instance)}
		}
		return providers.PlanResponse{Diff: fmt.Sprintf("- delete snapshot %s of instance %q\n  irreversible: a deleted snapshot cannot be brought back", s.name, s.instance),
			Irreversible: "a deleted snapshot cannot be brought back"}
	}
}

func (c *call) readSnapshot(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
	s := c.decodeSnapshot()
	if c.diags.HasErrors() || !s.known {
		return providers.ReadResponse{Observation: providers.Unknown}
	}
	inst, _, err := c.getInstance(ctx, s.instance)
	if err != nil {
		return providers.ReadResponse{Diagnostics: c.apiErr("Cannot Read Instance", err)}
	}
	if inst == nil {
		return providers.ReadResponse{Observation: providers.Absent, Detail: fmt.Sprintf("instance %q does not exist", s.instance)}
	}
	exists, err := c.hasSnapshot(ctx, s.instance, s.name)
	if err != nil {
		return providers.ReadResponse{Diagnostics: c.apiErr("Cannot List Snapshots", err)}
	}
	prev := func() cty.Value {
		if req.Prior != nil && req.Prior.Outputs != cty.NilVal && !req.Prior.Outputs.IsNull() {
			return req.Prior.Outputs
		}
		return snapshotOutputs(s, "")
	}
	switch s.action {
	case "create":
		if exists {
			r := providers.ReadResponse{Observation: providers.Present, Outputs: prev()}
			if req.Prior == nil {
				// Adopted: migrate cannot tell whether it made it, so
				// rollback keeps it.
				r.Inverse = &providers.Inverse{Description: fmt.Sprintf("nothing to undo: snapshot %s is kept", s.name), Data: marshal(snapshotInverse{Op: "none"})}
			}
			return r
		}
		if req.Prior != nil {
			return providers.ReadResponse{Observation: providers.Drifted, Detail: fmt.Sprintf("snapshot %s of instance %q is gone", s.name, s.instance)}
		}
		return providers.ReadResponse{Observation: providers.Absent}
	case "delete":
		if !exists {
			return providers.ReadResponse{Observation: providers.Present, Outputs: prev()}
		}
		if req.Prior != nil {
			return providers.ReadResponse{Observation: providers.Drifted, Detail: fmt.Sprintf("snapshot %s of instance %q exists again", s.name, s.instance)}
		}
		return providers.ReadResponse{Observation: providers.Absent}
	default: // restore: an action, not a state; done once it completed
		if req.Prior != nil {
			return providers.ReadResponse{Observation: providers.Present, Outputs: prev()}
		}
		return providers.ReadResponse{Observation: providers.Absent}
	}
}

func (c *call) applySnapshot(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
	s := c.decodeSnapshot()
	if c.diags.HasErrors() {
		return providers.ApplyResponse{}
	}
	if !s.known {
		c.errorf("Unknown Attribute Values", "%s cannot run: some of its settings are still unknown.", c.what)
		return providers.ApplyResponse{}
	}
	inst, _, err := c.getInstance(ctx, s.instance)
	if err != nil {
		return providers.ApplyResponse{Diagnostics: c.apiErr("Cannot Read Instance", err)}
	}
	if inst == nil {
		return providers.ApplyResponse{Diagnostics: c.unknownInstance(s.instance, "")}
	}
	exists, err := c.hasSnapshot(ctx, s.instance, s.name)
	if err != nil {
		return providers.ApplyResponse{Diagnostics: c.apiErr("Cannot List Snapshots", err)}
	}
	start := time.Now()
	switch s.action {
	case "create":
		if exists {
			c.logf("snapshot %s of instance %s already exists: nothing to do; rollback keeps it", s.name, s.instance)
			return providers.ApplyResponse{Outputs: snapshotOutputs(s, ""), Inverse: &providers.Inverse{Description: fmt.Sprintf("nothing to undo: snapshot %s existed already", s.name), Data: marshal(snapshotInverse{Op: "none"})}}
		}
		if err := c.c.CreateSnapshot(ctx, s.instance, s.name, false); err != nil {
			return providers.ApplyResponse{Diagnostics: c.apiErr("Cannot Create Snapshot", err)}
		}
		c.logf("snapshot %s of instance %s created in %s", s.name, s.instance, time.Since(start).Round(time.Millisecond))
		return providers.ApplyResponse{
			Outputs: snapshotOutputs(s, ""),
			Inverse: &providers.Inverse{Description: fmt.Sprintf("delete snapshot %s of instance %s", s.name, s.instance), Data: marshal(snapshotInverse{Op: "delete", Instance: s.instance, Snapshot: s.name})},
		}
	case "restore":
		if !exists {
			return providers.ApplyResponse{Diagnostics: phases.Errorf("Unknown Snapshot", "%s: instance %s has no snapshot %s (see `incus snapshot list %s`).", c.addr, s.instance, s.name, s.instance)}
		}
		before := ""
		if s.before {
			if before, err = c.freeSnapshotName(ctx, s.instance, snapshotName(c.addr, time.Now())+"-before"); err != nil {
				return providers.ApplyResponse{Diagnostics: c.apiErr("Cannot List Snapshots", err)}
			}
			if err := c.c.CreateSnapshot(ctx, s.instance, before, false); err != nil {
				return providers.ApplyResponse{Diagnostics: c.apiErr("Cannot Create Snapshot", err)}
			}
			c.logf("snapshot %s of instance %s taken before the restore", before, s.instance)
		}
		if err := c.c.RestoreSnapshot(ctx, s.instance, s.name); err != nil {
			return providers.ApplyResponse{Diagnostics: c.apiErr("Cannot Restore Snapshot", err)}
		}
		c.logf("instance %s restored to snapshot %s in %s", s.instance, s.name, time.Since(start).Round(time.Millisecond))
		r := providers.ApplyResponse{Outputs: snapshotOutputs(s, before)}
		if before != "" {
			r.Inverse = &providers.Inverse{Description: fmt.Sprintf("restore instance %s to snapshot %s, taken before the restore", s.instance, before), Data: marshal(snapshotInverse{Op: "restore", Instance: s.instance, Snapshot: before})}
		} else {
			c.logf("this restore cannot be undone: snapshot_before was not set")
		}
		return r
	default: // delete
		if !exists {
			c.logf("snapshot %s of instance %s is already absent", s.name, s.instance)
			return providers.ApplyResponse{Outputs: snapshotOutputs(s, "")}
		}
		if err := c.c.DeleteSnapshot(ctx, s.instance, s.name); err != nil {
			return providers.ApplyResponse{Diagnostics: c.apiErr("Cannot Delete Snapshot", err)}
		}
		c.logf("snapshot %s of instance %s deleted; this cannot be undone", s.name, s.instance)
		return providers.ApplyResponse{Outputs: snapshotOutputs(s, "")}
	}
}

func (c *call) revertSnapshot(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
	var inv snapshotInverse
	if err := json.Unmarshal(req.Inverse.Data, &inv); err != nil {
		return providers.RevertResponse{Diagnostics: phases.Errorf("Invalid Inverse", "The inverse of %s recorded in state cannot be read: %v.", c.addr, err)}
	}
	cfgInstance, _ := c.str("instance", "")
	cfgName, _ := c.str("name", "")
	name := pick(inv.Instance, cfgInstance)
	switch inv.Op {
	case "none":
		return providers.RevertResponse{}
	case "delete":
		snap := pick(inv.Snapshot, cfgName)
		exists, err := c.hasSnapshot(ctx, name, snap)
		if err != nil {
			if isNotFound(err) {
				c.logf("instance %s is gone, and its snapshots with it", name)
				return providers.RevertResponse{}
			}
			return providers.RevertResponse{Diagnostics: c.apiErr("Cannot List Snapshots", err)}
		}
		if !exists {
			c.logf("snapshot %s of instance %s is already gone", snap, name)
			return providers.RevertResponse{}
		}
		if err := c.c.DeleteSnapshot(ctx, name, snap); err != nil {
			return providers.RevertResponse{Diagnostics: c.apiErr("Cannot Delete Snapshot", err)}
		}
		c.logf("snapshot %s of instance %s deleted", snap, name)
	case "restore":
		if err := c.c.RestoreSnapshot(ctx, name, inv.Snapshot); err != nil {
			return providers.RevertResponse{Diagnostics: c.apiErr("Cannot Restore Snapshot", err)}
		}
		c.logf("instance %s restored to snapshot %s", name, inv.Snapshot)
	default:
		return providers.RevertResponse{Diagnostics: phases.Errorf("Invalid Inverse", "The inverse of %s has an unknown operation %q.", c.addr, inv.Op)}
	}
	return providers.RevertResponse{}
}
