package incus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// The plan, apply and revert of incus_device (device.go).

func planDevice(ctx context.Context, c *call, a deviceAttrs, _ devPrior) sdk.Plan[devicePrivate] {
	v, err := viewDevice(ctx, c, a)
	if err != nil {
		return sdk.Plan[devicePrivate]{Diagnostics: apiErr(c, "Cannot Read Instance", err)}
	}
	if v == nil {
		if c.AfterChanges {
			return sdk.Plan[devicePrivate]{Diff: fmt.Sprintf("%s device %s of instance %s, which a step this one depends on makes first", verbOf(a), a.Name, a.Instance)}
		}
		return sdk.Plan[devicePrivate]{Diagnostics: errorf("Unknown Instance", "%s: instance %q does not exist on Incus at %s%s. Create it first (an incus_instance step this one refers to: instance = incus_instance.NAME.name), or fix the name. Nothing was changed.", c.Addr, a.Instance, c.Settings.where, projectNote(c))}
	}
	priv := devicePrivate{ETag: v.etag, UUID: v.inst.Config["volatile.uuid"]}
	if a.Ensure == "present" {
		if d := checkRefs(ctx, c, deviceRefs(map[string]map[string]string{a.Name: a.Device}, nil)); d.HasErrors() {
			return sdk.Plan[devicePrivate]{Diagnostics: d}
		}
	}
	if v.done(a) {
		return sdk.Plan[devicePrivate]{Diff: fmt.Sprintf("instance %s already %s: nothing to change", a.Instance, doneText(a, v)), Private: priv}
	}
	return sdk.Plan[devicePrivate]{Diff: devicePlanText(a, v), Private: priv}
}

func verbOf(a deviceAttrs) string {
	if a.Ensure == "absent" {
		return "- detach"
	}
	return "+ attach"
}

func doneText(a deviceAttrs, v *deviceView) string {
	if a.Ensure == "absent" {
		return "has no device " + a.Name
	}
	if f := v.from(); f != "" {
		return fmt.Sprintf("has %s, from %s", describeDevice(a.Name, v.has), f)
	}
	return "has " + describeDevice(a.Name, v.has)
}

// devicePlanText is the plan's text of a change.
func devicePlanText(a deviceAttrs, v *deviceView) string {
	when := hotplugNote(v.inst, a.Ensure == "absent")
	var b strings.Builder
	switch {
	case a.Ensure == "absent":
		if v.has != nil {
			fmt.Fprintf(&b, "- detach %s from %s (%s)", describeDevice(a.Name, v.has), a.Instance, when)
		} else {
			fmt.Fprintf(&b, "- instance %s has no device %s", a.Instance, a.Name)
		}
		if v.profile != "" && v.has != nil {
			fmt.Fprintf(&b, "\n  masked with type = \"none\": %s gives the instance a device of that name", v.profile)
		}
		for _, k := range v.keys {
			fmt.Fprintf(&b, "\n  - config %s removed from the instance (its value is not shown, nor kept)", k)
		}
		if len(v.keys) > 0 {
			b.WriteString("\n  rollback: put the device back as it was, not the removed config (the value is kept nowhere)")
		} else {
			b.WriteString("\n  rollback: put it back as it was")
		}
	case v.has == nil:
		fmt.Fprintf(&b, "+ attach %s to %s (%s)", describeDevice(a.Name, a.Device), a.Instance, when)
		b.WriteString("\n  rollback: detach it")
	default:
		head := fmt.Sprintf("~ change %s of %s (%s)", describeDevice(a.Name, v.has), a.Instance, when)
		if f := v.from(); f != "" {
			head += fmt.Sprintf(", the instance's own over the one from %s", f)
		}
		b.WriteString(renderChanges(head, optionChanges(v.has, a.Device)))
		if v.own == nil {
			b.WriteString("\n  rollback: remove the instance's own device (the profile's applies again)")
		} else {
			b.WriteString("\n  rollback: put its previous options back")
		}
	}
	b.WriteString("\n  with the ETag read now; a change made meanwhile is refused, not overwritten")
	return b.String()
}

// hotplugNote says when the change takes effect.
func hotplugNote(inst *incusapi.Instance, detach bool) string {
	if inst.Status != "Running" {
		return strings.ToLower(inst.Status) + ": in effect from its next start"
	}
	if detach {
		return "running: hot-unplugged"
	}
	return "running: hot-plugged"
}

// describeDevice names a device for a person: "disk data (pool data,
// volume photos) at /mnt/data".
func describeDevice(name string, d map[string]string) string {
	typ := orDefault(d["type"], "device")
	var parts []string
	switch typ {
	case "disk":
		switch src := d["source"]; {
		case d["pool"] != "" && isVolumeName(src):
			parts = append(parts, "pool "+d["pool"], "volume "+src)
		case src != "":
			parts = append(parts, "source "+src)
		case d["pool"] != "":
			parts = append(parts, "pool "+d["pool"])
		}
		if d["readonly"] == "true" {
			parts = append(parts, "read-only")
		}
	case "nic":
		parts = append(parts, "network "+orDefault(d["network"], d["parent"]))
	default:
		for _, k := range slices.Sorted(maps.Keys(d)) {
			if k != "type" {
				parts = append(parts, k+"="+d[k])
			}
		}
	}
	s := typ + " " + name
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	if typ == "disk" && d["path"] != "" {
		s += " at " + d["path"]
	}
	return s
}

// optionChanges compares a device's options.
func optionChanges(have, want map[string]string) []change {
	var out []change
	for _, k := range slices.Sorted(maps.Keys(want)) {
		switch old, ok := have[k]; {
		case !ok:
			out = append(out, change{'+', fmt.Sprintf("%s = %q", k, want[k])})
		case old != want[k]:
			out = append(out, change{'~', fmt.Sprintf("%s: %q -> %q", k, old, want[k])})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(have)) {
		if _, ok := want[k]; !ok {
			out = append(out, change{'-', fmt.Sprintf("%s = %q", k, have[k])})
		}
	}
	return out
}

func applyDevice(ctx context.Context, c *call, a deviceAttrs, planned devicePrivate, prior devPrior) devApply {
	v, err := viewDevice(ctx, c, a)
	if err != nil {
		return devApply{Diagnostics: apiErr(c, "Cannot Read Instance", err)}
	}
	if v == nil {
		return devApply{Diagnostics: errorf("Unknown Instance", "%s: instance %q does not exist on Incus at %s; no device was attached or detached.", c.Addr, a.Instance, c.Settings.where)}
	}
	uuid := v.inst.Config["volatile.uuid"]
	if planned.UUID != "" && uuid != planned.UUID {
		return devApply{Diagnostics: errorf("Concurrent Change", "%s: instance %q was replaced after the plan read it (another instance of that name: its UUID differs). Make a new plan.", c.Addr, a.Instance)}
	}
	r := devApply{Outputs: deviceOutputs(a, v), Private: planned, Identity: identityOf(v.inst)}
	if v.done(a) {
		logf(c, "instance %s already %s", a.Instance, doneText(a, v))
		r.Revert = &sdk.RevertData[deviceRevert]{Description: fmt.Sprintf("nothing to undo: instance %s already %s", a.Instance, doneText(a, v)), Data: deviceRevert{Op: "none"}}
		if prior != nil && prior.Revert != nil { // applied again: what undoes the first apply stays
			r.Revert = prior.Revert
		}
		return r
	}
	if a.Ensure == "present" {
		if d := checkRefs(ctx, c, deviceRefs(map[string]map[string]string{a.Name: a.Device}, nil)); d.HasErrors() {
			return devApply{Diagnostics: d}
		}
	}
	etag := v.etag
	if planned.ETag != "" {
		etag = planned.ETag // a change since the plan makes the daemon refuse the update
	}
	if err := putOwnDevice(ctx, c, v.inst, a.Name, v.wantOwn(a), etag, v.keys...); err != nil {
		return devApply{Diagnostics: deviceErr(c, a, v.inst, err)}
	}
	logf(c, "instance %s: %s", a.Instance, strings.SplitN(devicePlanText(a, v), "\n", 2)[0])
	inv := deviceRevert{Op: "restore", Instance: a.Instance, UUID: uuid, Name: a.Name, Previous: maps.Clone(v.own)}
	what := "put back the previous options of device " + a.Name
	switch {
	case v.own == nil && a.Ensure == "present":
		what = "detach device " + a.Name
	case a.Ensure == "absent":
		what = "put device " + a.Name + " back as it was"
	}
	if len(v.keys) > 0 {
		what += " (not config " + strings.Join(v.keys, ", ") + ": its value is kept nowhere)"
	}
	r.Revert = &sdk.RevertData[deviceRevert]{Description: fmt.Sprintf("%s of instance %s", what, a.Instance), Data: inv}
	return r
}

// putOwnDevice sets (nil: deletes) the instance's own device of that
// name, and removes the config keys unset, with the ETag given.
func putOwnDevice(ctx context.Context, c *call, inst *incusapi.Instance, name string, dev map[string]string, etag string, unset ...string) error {
	put := inst.Put()
	if len(unset) > 0 {
		put.Config = maps.Clone(put.Config)
		for _, k := range unset {
			delete(put.Config, k)
		}
	}
	put.Devices = map[string]map[string]string{}
	for k, d := range inst.Devices {
		put.Devices[k] = maps.Clone(d)
	}
	if dev == nil {
		delete(put.Devices, name)
	} else {
		put.Devices[name] = dev
	}
	return c.Settings.c.UpdateInstance(ctx, inst.Name, put, etag)
}

// deviceErr is the diagnostic of a refused change: on a running
// instance, what to do when the daemon cannot hot-plug the device.
func deviceErr(c *call, a deviceAttrs, inst *incusapi.Instance, err error) phases.Diagnostics {
	var status *incusapi.StatusError
	if errors.Is(err, incusapi.ErrConflict) || !errors.As(err, &status) || inst.Status != "Running" {
		return apiErr(c, "Cannot Change Device", err)
	}
	verb := "attach device %s to"
	if a.Ensure == "absent" {
		verb = "detach device %s from"
	}
	return errorf("Cannot Change Device", "%s: Incus at %s refused to "+verb+" running instance %s: %v. If it cannot hot-plug this device, stop the instance first (an incus_instance_state step with state = \"stopped\" before this one, and one with state = \"running\" after it); otherwise fix the device's options. Nothing was changed.",
		c.Addr, c.Settings.where, a.Name, a.Instance, strings.TrimSuffix(err.Error(), "."))
}

func revertDevice(ctx context.Context, c *call, a deviceAttrs, u sdk.Applied[deviceRevert]) phases.Diagnostics {
	inv := u.Data
	if inv.Op == "none" {
		return nil
	}
	if inv.Op != "restore" {
		return errorf("Invalid Revert", "The revert data of %s has an unknown operation %q.", c.Addr, inv.Op)
	}
	inst, etag, err := getInstance(ctx, c, inv.Instance)
	if err != nil {
		return apiErr(c, "Cannot Read Instance", err)
	}
	if inst == nil {
		logf(c, "instance %s is gone, and its device %s with it: nothing to undo", inv.Instance, inv.Name)
		return nil
	}
	if id := inst.Config["volatile.uuid"]; inv.UUID != "" && id != inv.UUID {
		return warning("Instance Replaced", "%s: instance %s is not the one the step changed (its UUID differs: it was deleted and made again); its device %s was left as it is.", c.Addr, inv.Instance, inv.Name)
	}
	if maps.Equal(inst.Devices[inv.Name], inv.Previous) && (inst.Devices[inv.Name] == nil) == (inv.Previous == nil) {
		logf(c, "instance %s: device %s is already as it was", inv.Instance, inv.Name)
		return nil
	}
	if err := putOwnDevice(ctx, c, inst, inv.Name, maps.Clone(inv.Previous), etag); err != nil {
		return apiErr(c, "Cannot Restore Device", err)
	}
	if inv.Previous == nil {
		logf(c, "instance %s: device %s removed", inv.Instance, inv.Name)
	} else {
		logf(c, "instance %s: device %s put back (%s)", inv.Instance, inv.Name, describeDevice(inv.Name, inv.Previous))
	}
	return nil
}
