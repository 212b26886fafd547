package incus

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// InstanceSpec is the attributes of an incus_instance step as the runbook
// writes them: the step type's schema. Read, plan and apply work on the
// DesiredInstance that normalize makes of it.
type InstanceSpec struct {
	Name        string                       `cty:"name" doc:"The instance name; default the step's name."`
	Ensure      string                       `cty:"ensure" doc:"\"present\" (default) or \"absent\" (delete it: irreversible)."`
	Type        string                       `cty:"type" doc:"\"virtual-machine\" (default) or \"container\"."`
	Image       string                       `cty:"image" doc:"A local image alias or fingerprint to create it from."`
	Empty       bool                         `cty:"empty" doc:"Create a VM with an empty root disk (to install from an iso device) instead of an image."`
	CPU         *float64                     `cty:"cpu" doc:"CPUs (limits.cpu)."`
	Memory      string                       `cty:"memory" doc:"Memory (limits.memory), such as \"16GiB\"."`
	Profiles    []string                     `cty:"profiles" doc:"Profiles, in order; the daemon's default when unset."`
	Config      map[string]string            `cty:"config" doc:"Instance config keys, such as security.secureboot; only the keys listed are managed."`
	Devices     map[string]map[string]string `cty:"devices" doc:"Devices by name, each a map with a type: a host directory shared by virtiofs {type=\"disk\", source=\"/tank/data\", path=\"/var/mnt/data\"} (mount tag incus_NAME), a volume {type=\"disk\", pool=\"default\", source=\"bulk\"}, a GPU {type=\"gpu\", gputype=\"physical\", pci=\"0000:00:02.0\"}, an ISO {type=\"disk\", source=\"/path/talos.iso\", \"boot.priority\"=\"10\"}, a NIC {type=\"nic\", network=\"incusbr0\"} or {type=\"nic\", nictype=\"bridged\", parent=\"br0\"}. A disk's pool and volume and a nic's network (or bridged or macvlan parent) must exist; for a volume an incus_volume step makes, refer to its outputs (pool = incus_volume.NAME.pool, source = incus_volume.NAME.name) so that the plan waits for it."`
	Start       bool                         `cty:"start" doc:"Start the instance once created."`
	Description string                       `cty:"description" doc:"The instance description, set at creation."`
	RetainUntil string                       `cty:"retain_until" doc:"With ensure = \"absent\": the date (YYYY-MM-DD) until which an instance kept for rollback must stay; its deletion is refused until that date has passed."`
	NIC         string                       `cty:"nic" doc:"The NIC whose addresses the outputs report: a nic device name (or a guest interface name); default the first nic device in name order (eth0 before eth1)."`
	WaitFor     string                       `cty:"wait_for" doc:"\"ipv4\" or \"ipv6\": apply waits until the NIC has a global address of that family (reported by the guest, or else by a DHCP lease of its managed network), so later steps can use it."`
	WaitTimeout string                       `cty:"wait_timeout" doc:"How long wait_for waits, such as \"5m\"; default \"2m\"."`
}

// instanceOut is the outputs of an incus_instance step; the status and
// addresses are those of the last apply or read ("" when none is seen).
type instanceOut struct {
	Name   string `cty:"name"`
	Type   string `cty:"type"`
	Status string `cty:"status"`
	IPv4   string `cty:"ipv4"`
	IPv6   string `cty:"ipv6"`
	MAC    string `cty:"mac"`
}

// Instance is the name of the incus_instance step type.
const Instance = "incus_instance"

var instanceStep = &sdk.StepType[*conn, InstanceSpec, instancePrivate, instanceRevert]{
	Name:        Instance,
	Description: "Ensures an Incus instance exists with the given type, image (or empty disk), limits, profiles, config and devices; or, with ensure = \"absent\", that it is deleted (refused for instances kept for rollback before retain_until). The storage pools, custom volumes and networks its devices name must exist on the host: plan and apply refuse, changing nothing, naming the missing ones and those the host has.",
	Rollback:    "Deletes the instance it created, or restores the previous config and devices; a deletion cannot be undone.",
	Outputs:     instanceOut{},
	Validate: func(c *call, a *InstanceSpec) phases.Diagnostics {
		_, diags := normalize(c.Addr, *a, c.Sensitive)
		return diags
	},
	Rebase: true, // a later step may change a declared device: see instance_handover.go
	Read:   readInstance,
	Plan:   planInstance,
	Apply:  applyInstance,
	Revert: revertInstance,
}

// instancePrivate is kept in state with a step's record: the keys it
// manages (so a key dropped from the runbook is removed), and, from a
// plan, the ETag the plan was made against.
type instancePrivate struct {
	ETag   string `json:"etag,omitempty"`
	Exists bool   `json:"exists,omitempty"`
	// Planned: made by a plan (Apply without one skips the plan's checks).
	Planned bool     `json:"planned,omitempty"`
	Config  []string `json:"managed_config,omitempty"`
	Devices []string `json:"managed_devices,omitempty"`
	// HandedOver: declared devices as later steps left them (see
	// instance_handover.go).
	HandedOver map[string]handedDevice `json:"handed_over,omitempty"`
	// HandedConfig: declared config keys a later step removed (the
	// cloud-init.user-data of a first install, cleared once installed).
	HandedConfig map[string]handedKey `json:"handed_config,omitempty"`
}

type (
	instPrior = *sdk.Prior[instancePrivate, instanceRevert]
	instApply = sdk.Apply[instancePrivate, instanceRevert]
	instInv   = *sdk.RevertData[instanceRevert]
)

// managedOf is what the last apply managed (none before one).
func managedOf(prior instPrior) instancePrivate {
	if prior == nil {
		return instancePrivate{}
	}
	return prior.Private
}

// instanceRevert is how to undo an incus_instance step.
type instanceRevert struct {
	Op       string `json:"op"` // "delete", "restore" or "none"
	Instance string `json:"instance,omitempty"`
	// Config holds the previous value of each key changed; null: it was absent.
	Config map[string]*string `json:"config,omitempty"`
	// Devices holds the previous form of each device changed; null: absent.
	Devices     map[string]map[string]string `json:"devices,omitempty"`
	Profiles    []string                     `json:"profiles,omitempty"`
	SetProfiles bool                         `json:"set_profiles,omitempty"`
	// NotKept lists what cannot be restored because it was sensitive.
	NotKept []string `json:"not_kept,omitempty"`
}

// unknownInstance is the diagnostic of an instance that does not exist.
func unknownInstance(c *call, name string, hint string) phases.Diagnostics {
	return phases.Errorf("Unknown Instance", "%s: Incus at %s has no instance %q%s.%s", c.Addr, c.Settings.where, name, projectNote(c), hint)
}

func projectNote(c *call) string {
	if c.Settings.opts.Project != "" {
		return fmt.Sprintf(" in project %q", c.Settings.opts.Project)
	}
	return ""
}

// planHint ends the error of a plan whose instance does not exist yet.
const planHint = " If an earlier step creates it, refer to that step's output (instance = incus_instance.NAME.name) so that the plan waits for it."

// existing reads an instance that must exist.
func existing(ctx context.Context, c *call, name, hint string) (*incusapi.Instance, phases.Diagnostics) {
	inst, _, err := getInstance(ctx, c, name)
	if err != nil {
		return nil, apiErr(c, "Cannot Read Instance", err)
	}
	if inst == nil {
		return nil, unknownInstance(c, name, hint)
	}
	return inst, nil
}

// getInstance reads an instance; nil without error when it does not exist.
func getInstance(ctx context.Context, c *call, name string) (*incusapi.Instance, string, error) {
	inst, etag, err := c.Settings.c.Instance(ctx, name)
	if incusapi.IsNotFound(err) {
		return nil, "", nil
	}
	return inst, etag, err
}

// --- plan

func planInstance(ctx context.Context, c *call, spec InstanceSpec, prior instPrior) sdk.Plan[instancePrivate] {
	s := desired(c, spec)
	inst, etag, err := getInstance(ctx, c, s.Name)
	if err != nil {
		return sdk.Plan[instancePrivate]{Diagnostics: apiErr(c, "Cannot Read Instance", err)}
	}
	if s.Ensure == "absent" {
		return planAbsent(c, s, inst)
	}
	if inst == nil {
		if d := needsSource(c, s); d != nil {
			return sdk.Plan[instancePrivate]{Diagnostics: d}
		}
		if d := instanceRefs(ctx, c, s, nil); d.HasErrors() {
			return sdk.Plan[instancePrivate]{Diagnostics: d}
		}
		return sdk.Plan[instancePrivate]{Diff: createDiff(s), Private: instancePrivate{Planned: true}}
	}
	if inst.Type != s.Type {
		return sdk.Plan[instancePrivate]{Diagnostics: errorf("Instance Type Differs", "%s: instance %q is a %s, but the step says type = %q. Incus cannot change an instance's type: fix the step, or delete the instance first.", c.Addr, s.Name, inst.Type, s.Type)}
	}
	if d := instanceRefs(ctx, c, s, inst); d.HasErrors() {
		return sdk.Plan[instancePrivate]{Diagnostics: d}
	}
	pv := managedOf(prior)
	s, kept := withHandedOver(s, pv)
	s, keys := withHandedConfig(s, pv)
	ch := instanceChanges(s, inst, pv.Config, pv.Devices)
	priv := instancePrivate{ETag: etag, Exists: true, Planned: true}
	if len(ch) == 0 {
		return sdk.Plan[instancePrivate]{Diff: fmt.Sprintf("instance %q (%s, %s) already has the settings the step manages: nothing to change", s.Name, s.Type, strings.ToLower(inst.Status)) + handedNote(kept, keys) + waitNote(s), Private: priv}
	}
	head := fmt.Sprintf("~ update %s %q (%s) with the ETag read now; a change made meanwhile is refused, not overwritten", s.Type, s.Name, strings.ToLower(inst.Status))
	return sdk.Plan[instancePrivate]{Diff: renderChanges(head, ch) + waitNote(s), Private: priv}
}

// needsSource refuses to create an instance from nothing.
func needsSource(c *call, s DesiredInstance) phases.Diagnostics {
	if s.Image == "" && !s.Empty {
		return errorf("Missing Attribute", "%s creates instance %q, so it needs image (a local image alias or fingerprint) or empty = true (for a VM installed from an iso device).", c.Addr, s.Name)
	}
	return nil
}

// --- the cleanup guard

// guardDelete says whether deleting inst is allowed: instances that an
// incus_instance_state step kept for rollback stay until retain_until has
// passed.
func guardDelete(c *call, s DesiredInstance, inst *incusapi.Instance, now time.Time) phases.Diagnostics {
	if inst.Config[KeyKeepForRollback] != "true" {
		return nil
	}
	since := ""
	if at := inst.Config[KeyStoppedAt]; at != "" {
		since = " on " + at
	}
	by := ""
	if b := inst.Config[KeyStoppedBy]; b != "" {
		by = " by " + b
	}
	if s.RetainUntil == "" {
		return phases.Errorf("Instance Kept For Rollback",
			"%s would delete instance %q, which migrate stopped%s%s and keeps so that `migrate rollback` can start it again (%s=true). Deleting it makes that rollback impossible. To delete it in the cleanup phase, set retain_until = \"YYYY-MM-DD\" on this step: the deletion is then refused until that date has passed. To keep it, remove this step.",
			c.Addr, s.Name, since, by, KeyKeepForRollback)
	}
	until, err := time.ParseInLocation(retainLayout, s.RetainUntil, time.Local)
	if err != nil {
		return nil // reported by normalize
	}
	if !now.Before(until.AddDate(0, 0, 1)) {
		return nil
	}
	return phases.Errorf("Instance Retained Until "+s.RetainUntil,
		"%s would delete instance %q, which migrate stopped%s%s and keeps for rollback; the step says retain_until = %q, and today is %s. The deletion is refused until that date has passed: run this phase again from %s, or move retain_until earlier if you no longer need the way back.",
		c.Addr, s.Name, since, by, s.RetainUntil, now.Format(retainLayout), until.AddDate(0, 0, 1).Format(retainLayout))
}

func planAbsent(c *call, s DesiredInstance, inst *incusapi.Instance) sdk.Plan[instancePrivate] {
	if inst == nil {
		return sdk.Plan[instancePrivate]{Diff: fmt.Sprintf("instance %q is already absent: nothing to delete", s.Name)}
	}
	if d := guardDelete(c, s, inst, time.Now()); d.HasErrors() {
		return sdk.Plan[instancePrivate]{Diagnostics: d}
	}
	head := fmt.Sprintf("- delete %s %q (%s", inst.Type, s.Name, strings.ToLower(inst.Status))
	if inst.Status == "Running" {
		head += ", stopped by force first"
	}
	head += ")"
	if inst.Config[KeyKeepForRollback] == "true" {
		head += fmt.Sprintf("\n  it was kept for rollback since %s; retain_until %s has passed", firstNonEmpty(inst.Config[KeyStoppedAt], "its stop"), s.RetainUntil)
	}
	return sdk.Plan[instancePrivate]{Diff: head + "\n  irreversible: a deleted instance and its snapshots cannot be brought back, so rollback cannot start it again",
		Irreversible: "a deleted instance and its snapshots cannot be brought back"}
}

// --- read

func readInstance(ctx context.Context, c *call, spec InstanceSpec, prior instPrior) sdk.Read[instanceRevert] {
	s := desired(c, spec)
	inst, _, err := getInstance(ctx, c, s.Name)
	if err != nil {
		return sdk.Read[instanceRevert]{Diagnostics: apiErr(c, "Cannot Read Instance", err)}
	}
	if s.Ensure == "absent" {
		if inst == nil {
			return sdk.Read[instanceRevert]{Observation: providers.Present, Outputs: instanceOut{Name: s.Name, Type: s.Type}}
		}
		return sdk.Read[instanceRevert]{Observation: providers.Absent, Detail: fmt.Sprintf("instance %q still exists", s.Name)}
	}
	if c.Rebase {
		return readHandOver(s, inst, managedOf(prior))
	}
	if inst == nil {
		return sdk.Read[instanceRevert]{Observation: providers.Absent, Detail: fmt.Sprintf("instance %q does not exist", s.Name)}
	}
	pv := managedOf(prior)
	s, _ = withHandedOver(s, pv)
	s, _ = withHandedConfig(s, pv)
	ch := instanceChanges(s, inst, pv.Config, pv.Devices)
	if inst.Type != s.Type {
		ch = append([]change{{'~', fmt.Sprintf("type: %q -> %q", inst.Type, s.Type)}}, ch...)
	}
	if len(ch) > 0 {
		return sdk.Read[instanceRevert]{Observation: providers.Drifted, Detail: renderChanges(fmt.Sprintf("instance %q differs from the step:", s.Name), ch)}
	}
	a, d := addresses(ctx, c, s.Name, inst, s.NIC)
	if d.HasErrors() {
		return sdk.Read[instanceRevert]{Diagnostics: d}
	}
	if (a.Status == "Running" || c.InFlight) && !a.has(s.WaitFor) {
		// Created, but the run that waited for its address stopped first
		// (read in flight: maybe before it even started it): apply again,
		// which starts it if it never ran, and waits.
		return sdk.Read[instanceRevert]{Observation: providers.Drifted, Detail: fmt.Sprintf("instance %q has no %s address yet (wait_for); last seen: %s", s.Name, s.WaitFor, a.Seen)}
	}
	r := sdk.Read[instanceRevert]{Observation: providers.Present, Outputs: a.outputs(s.Name, inst.Type), Identity: identityOf(inst)}
	if prior == nil && inst.Config[KeyCreatedBy] == c.Addr.String() {
		r.Revert = deleteRevert(s.Name)
	}
	return r
}

func deleteRevert(name string) instInv {
	return &sdk.RevertData[instanceRevert]{
		Description: fmt.Sprintf("delete instance %s (stopped by force first)", name),
		Data:        instanceRevert{Op: "delete", Instance: name},
	}
}
