package incus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// InstanceSpec is an incus_instance step: its schema and, decoded and
// normalised (defaults, cpu and memory merged into Config), its inputs.
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
	Devices     map[string]map[string]string `cty:"devices" doc:"Devices by name, each a map with a type: a host directory shared by virtiofs {type=\"disk\", source=\"/tank/data\", path=\"/var/mnt/data\"} (mount tag incus_NAME), a volume {type=\"disk\", pool=\"default\", source=\"bulk\"}, a GPU {type=\"gpu\", gputype=\"physical\", pci=\"0000:00:02.0\"}, an ISO {type=\"disk\", source=\"/path/talos.iso\", \"boot.priority\"=\"10\"}."`
	Start       bool                         `cty:"start" doc:"Start the instance once created."`
	Description string                       `cty:"description" doc:"The instance description, set at creation."`
	RetainUntil string                       `cty:"retain_until" doc:"With ensure = \"absent\": the date (YYYY-MM-DD) until which an instance kept for rollback must stay; its deletion is refused until that date has passed."`
	NIC         string                       `cty:"nic" doc:"The NIC whose addresses the outputs report: a nic device name (or a guest interface name); default the first nic device in name order (eth0 before eth1)."`
	WaitFor     string                       `cty:"wait_for" doc:"\"ipv4\" or \"ipv6\": apply waits until the NIC has a global address of that family (reported by the guest, or else by a DHCP lease of its managed network), so later steps can use it."`
	WaitTimeout string                       `cty:"wait_timeout" doc:"How long wait_for waits, such as \"5m\"; default \"2m\"."`

	// ProfilesSet: profiles was given (an empty list clears them).
	ProfilesSet bool
	// Sensitive config keys and devices (any of whose keys is sensitive).
	SensitiveConfig  map[string]bool
	SensitiveDevices map[string]bool
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

var instanceStep = &sdk.StepType[*conn, InstanceSpec, instancePrivate, instanceInverse]{
	Name:        Instance,
	Description: "Ensures an Incus instance exists with the given type, image (or empty disk), limits, profiles, config and devices; or, with ensure = \"absent\", that it is deleted (refused for instances kept for rollback before retain_until).",
	Rollback:    "Deletes the instance it created, or restores the previous config and devices; a deletion cannot be undone.",
	Outputs:     instanceOut{},
	Validate: func(c *call, s *InstanceSpec) phases.Diagnostics {
		return normalize(c.Addr, s, c.Sensitive)
	},
	Read:   readInstance,
	Plan:   planInstance,
	Apply:  applyInstance,
	Revert: revertInstance,
}

// retainLayout is the format of retain_until.
const retainLayout = "2006-01-02"

var instanceNameRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9-]{0,62}$`)

// normalize fills the defaults of a decoded incus_instance step, merges
// cpu and memory into its config, and checks it; sensitive says whether
// an attribute (or a key inside it) is sensitive.
func normalize(addr phases.Address, s *InstanceSpec, sensitive func(string, ...any) bool) phases.Diagnostics {
	var diags phases.Diagnostics
	errorf := func(summary, format string, args ...any) {
		diags = append(diags, phases.Errorf(summary, format, args...)...)
	}
	what := addr.String()
	s.Name = orDefault(s.Name, addr.Name)
	s.Ensure = orDefault(s.Ensure, "present")
	s.Type = orDefault(s.Type, "virtual-machine")
	s.ProfilesSet = s.Profiles != nil
	s.SensitiveConfig, s.SensitiveDevices = map[string]bool{}, map[string]bool{}
	if s.Config == nil {
		s.Config = map[string]string{}
	}
	for key := range s.Config {
		if sensitive("config", key) {
			s.SensitiveConfig[key] = true
		}
	}
	if s.CPU != nil {
		if *s.CPU != math.Trunc(*s.CPU) || *s.CPU <= 0 {
			errorf("Invalid Attribute Value", "The %q attribute of %s must be a whole number above zero.", "cpu", what)
		}
		if _, dup := s.Config["limits.cpu"]; dup {
			errorf("Conflicting Attributes", "%s sets both cpu and config[\"limits.cpu\"]; keep one.", what)
		}
		s.Config["limits.cpu"] = strconv.FormatFloat(*s.CPU, 'f', 0, 64)
		if sensitive("cpu") {
			s.SensitiveConfig["limits.cpu"] = true
		}
	}
	if s.Memory != "" {
		if _, dup := s.Config["limits.memory"]; dup {
			errorf("Conflicting Attributes", "%s sets both memory and config[\"limits.memory\"]; keep one.", what)
		}
		s.Config["limits.memory"] = s.Memory
		if sensitive("memory") {
			s.SensitiveConfig["limits.memory"] = true
		}
	}
	for key := range s.Config {
		if strings.HasPrefix(key, "user.migrate.") {
			errorf("Reserved Config Key", "%s sets %q: the user.migrate.* keys are migrate's own marks (kept for rollback, created by); use another user.* key.", what, key)
		}
	}
	if s.Devices == nil {
		s.Devices = map[string]map[string]string{}
	}
	for name, dev := range s.Devices {
		if sensitive("devices", name) {
			s.SensitiveDevices[name] = true
		}
		if dev["type"] == "" {
			errorf("Invalid Device", "Device %q of %s has no type: every device needs one, such as type = \"disk\" or type = \"gpu\".", name, what)
		}
	}
	if !instanceNameRE.MatchString(s.Name) {
		errorf("Invalid Instance Name", "%q is not a valid instance name for %s: use letters, digits and dashes, starting with a letter, at most 63 characters (set name when the step's own name does not fit).", s.Name, what)
	}
	switch s.Ensure {
	case "present", "absent":
	default:
		errorf("Invalid Attribute Value", "The \"ensure\" attribute of %s must be \"present\" or \"absent\", not %q.", what, s.Ensure)
	}
	switch s.Type {
	case "virtual-machine", "container":
	default:
		errorf("Invalid Attribute Value", "The \"type\" attribute of %s must be \"virtual-machine\" or \"container\", not %q.", what, s.Type)
	}
	if s.Image != "" && s.Empty {
		errorf("Conflicting Attributes", "%s sets both image and empty = true: an instance starts either from an image or from an empty disk.", what)
	}
	if s.Empty && s.Type == "container" {
		errorf("Invalid Attribute Value", "%s: empty = true is for virtual machines (installed from an iso device); a container needs an image.", what)
	}
	switch s.WaitFor {
	case "", "ipv4", "ipv6":
	default:
		errorf("Invalid Attribute Value", "The \"wait_for\" attribute of %s must be \"ipv4\" or \"ipv6\", not %q.", what, s.WaitFor)
	}
	if s.WaitTimeout != "" {
		if d, err := time.ParseDuration(s.WaitTimeout); err != nil || d <= 0 {
			errorf("Invalid Attribute Value", "The \"wait_timeout\" attribute of %s must be a duration above zero, such as \"5m\", not %q.", what, s.WaitTimeout)
		}
	}
	if s.WaitFor != "" && s.Ensure == "absent" {
		diags = append(diags, warning("Attribute Ignored", "wait_for of %s only applies with ensure = \"present\"; it is ignored.", what)...)
	}
	if s.RetainUntil != "" {
		if _, err := time.ParseInLocation(retainLayout, s.RetainUntil, time.Local); err != nil {
			errorf("Invalid Attribute Value", "The \"retain_until\" attribute of %s must be a date as YYYY-MM-DD, such as \"2026-12-31\", not %q.", what, s.RetainUntil)
		}
		if s.Ensure == "present" {
			diags = append(diags, warning("Attribute Ignored", "retain_until of %s only applies with ensure = \"absent\"; it is ignored.", what)...)
		}
	}
	return diags
}

// CreateRequest is the body of POST /1.0/instances that creates the
// instance of s; createdBy is recorded in it (KeyCreatedBy). It is a pure
// function, so the bodies of VM-only devices can be checked without a VM.
// It never asks the daemon to start the instance: start = true is a
// separate state change, so that a failed start leaves an instance the
// next run recognises as its own.
func CreateRequest(s InstanceSpec, createdBy string) incusapi.InstancesPost {
	post := incusapi.InstancesPost{Name: s.Name, Type: s.Type}
	post.Config = map[string]string{}
	maps.Copy(post.Config, s.Config)
	if createdBy != "" {
		post.Config[KeyCreatedBy] = createdBy
	}
	post.Devices = map[string]map[string]string{}
	for name, dev := range s.Devices {
		post.Devices[name] = maps.Clone(dev)
	}
	if s.ProfilesSet {
		post.Profiles = slices.Clone(s.Profiles)
	}
	post.Description = s.Description
	switch {
	case s.Empty:
		post.Source = incusapi.InstanceSource{Type: "none"}
	case isFingerprint(s.Image):
		post.Source = incusapi.InstanceSource{Type: "image", Fingerprint: s.Image}
	default:
		post.Source = incusapi.InstanceSource{Type: "image", Alias: s.Image}
	}
	return post
}

var fingerprintRE = regexp.MustCompile(`^[0-9a-f]{12,64}$`)

// isFingerprint: 12 to 64 lowercase hex digits name an image by
// fingerprint (as `incus image list` shows it); anything else is an alias.
func isFingerprint(s string) bool { return fingerprintRE.MatchString(s) }

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
}

type (
	instPrior = *sdk.Prior[instancePrivate, instanceInverse]
	instApply = sdk.Apply[instancePrivate, instanceInverse]
	instInv   = *sdk.Inverse[instanceInverse]
)

// managedOf is what the last apply managed (none before one).
func managedOf(prior instPrior) instancePrivate {
	if prior == nil {
		return instancePrivate{}
	}
	return prior.Private
}

// instanceInverse is how to undo an incus_instance step.
type instanceInverse struct {
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

// change is one line of a diff.
type change struct {
	sign byte // '+', '~', '-'
	text string
}

// instanceChanges compares the managed settings with the live instance.
// removed lists the keys and devices the step managed before and no
// longer lists.
func instanceChanges(s InstanceSpec, live *incusapi.Instance, removedConfig, removedDevices []string) []change {
	var out []change
	for _, k := range slices.Sorted(maps.Keys(s.Config)) {
		want := s.Config[k]
		sens := s.SensitiveConfig[k]
		have, ok := live.Config[k]
		switch {
		case !ok:
			out = append(out, change{'+', fmt.Sprintf("config %s = %s", k, show(want, sens))})
		case have != want:
			out = append(out, change{'~', fmt.Sprintf("config %s: %s -> %s", k, show(have, sens), show(want, sens))})
		}
	}
	for _, k := range removedConfig {
		if _, ok := s.Config[k]; ok {
			continue
		}
		if have, ok := live.Config[k]; ok {
			out = append(out, change{'-', fmt.Sprintf("config %s (was %s)", k, show(have, s.SensitiveConfig[k]))})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.Devices)) {
		want := s.Devices[name]
		sens := s.SensitiveDevices[name]
		have, ok := live.Devices[name]
		switch {
		case !ok:
			out = append(out, change{'+', fmt.Sprintf("device %s %s%s", name, showDevice(want, sens), deviceNote(s.Type, name, want))})
		case !maps.Equal(have, want):
			out = append(out, change{'~', fmt.Sprintf("device %s: %s", name, deviceDiff(have, want, sens))})
		}
	}
	for _, name := range removedDevices {
		if _, ok := s.Devices[name]; ok {
			continue
		}
		if have, ok := live.Devices[name]; ok {
			out = append(out, change{'-', fmt.Sprintf("device %s (was %s)", name, showDevice(have, false))})
		}
	}
	if s.ProfilesSet && !slices.Equal(s.Profiles, live.Profiles) {
		out = append(out, change{'~', fmt.Sprintf("profiles: [%s] -> [%s]", strings.Join(live.Profiles, ", "), strings.Join(s.Profiles, ", "))})
	}
	return out
}

// showDevice prints a device's keys, sorted.
func showDevice(dev map[string]string, sens bool) string {
	if sens {
		return "{" + phases.Redacted + "}"
	}
	parts := make([]string, 0, len(dev))
	for _, k := range slices.Sorted(maps.Keys(dev)) {
		parts = append(parts, fmt.Sprintf("%s=%q", k, dev[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// deviceDiff prints what changes inside a device, key by key.
func deviceDiff(have, want map[string]string, sens bool) string {
	if sens {
		return phases.Redacted + " changes"
	}
	keys := map[string]bool{}
	for k := range have {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		h, hok := have[k]
		w, wok := want[k]
		switch {
		case !hok:
			parts = append(parts, fmt.Sprintf("+%s=%q", k, w))
		case !wok:
			parts = append(parts, fmt.Sprintf("-%s", k))
		case h != w:
			parts = append(parts, fmt.Sprintf("%s %q -> %q", k, h, w))
		}
	}
	return strings.Join(parts, ", ")
}

// deviceNote says what a device will be inside a VM.
func deviceNote(typ, name string, dev map[string]string) string {
	if typ != "virtual-machine" {
		return ""
	}
	switch dev["type"] {
	case "disk":
		switch {
		case dev["path"] == "/":
			return ""
		case dev["pool"] != "":
			return "  (a block disk from a storage volume)"
		case strings.HasSuffix(strings.ToLower(dev["source"]), ".iso"):
			return "  (an ISO attached as a CD-ROM)"
		case strings.HasPrefix(dev["source"], "/") && dev["path"] != "":
			return fmt.Sprintf("  (a host directory shared through virtiofs, mount tag %q)", "incus_"+name)
		}
	case "gpu":
		if dev["gputype"] == "" || dev["gputype"] == "physical" {
			return "  (physical GPU passthrough)"
		}
	}
	return ""
}

func renderChanges(head string, ch []change) string {
	var b strings.Builder
	b.WriteString(head)
	for _, x := range ch {
		fmt.Fprintf(&b, "\n  %c %s", x.sign, x.text)
	}
	return b.String()
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

func planInstance(ctx context.Context, c *call, s InstanceSpec, prior instPrior) sdk.Plan[instancePrivate] {
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
		return sdk.Plan[instancePrivate]{Diff: createDiff(s), Private: instancePrivate{Planned: true}}
	}
	if inst.Type != s.Type {
		return sdk.Plan[instancePrivate]{Diagnostics: errorf("Instance Type Differs", "%s: instance %q is a %s, but the step says type = %q. Incus cannot change an instance's type: fix the step, or delete the instance first.", c.Addr, s.Name, inst.Type, s.Type)}
	}
	pv := managedOf(prior)
	ch := instanceChanges(s, inst, pv.Config, pv.Devices)
	priv := instancePrivate{ETag: etag, Exists: true, Planned: true}
	if len(ch) == 0 {
		return sdk.Plan[instancePrivate]{Diff: fmt.Sprintf("instance %q (%s, %s) already has the settings the step manages: nothing to change", s.Name, s.Type, strings.ToLower(inst.Status)) + waitNote(s), Private: priv}
	}
	head := fmt.Sprintf("~ update %s %q (%s) with the ETag read now; a change made meanwhile is refused, not overwritten", s.Type, s.Name, strings.ToLower(inst.Status))
	return sdk.Plan[instancePrivate]{Diff: renderChanges(head, ch) + waitNote(s), Private: priv}
}

// needsSource refuses to create an instance from nothing.
func needsSource(c *call, s InstanceSpec) phases.Diagnostics {
	if s.Image == "" && !s.Empty {
		return errorf("Missing Attribute", "%s creates instance %q, so it needs image (a local image alias or fingerprint) or empty = true (for a VM installed from an iso device).", c.Addr, s.Name)
	}
	return nil
}

func createDiff(s InstanceSpec) string {
	from := fmt.Sprintf("from image %q", s.Image)
	if s.Empty {
		from = "with an empty root disk"
	}
	head := fmt.Sprintf("+ create %s %q %s", s.Type, s.Name, from)
	if s.Start {
		head += ", then start it"
	}
	live := &incusapi.Instance{}
	ch := instanceChanges(s, live, nil, nil)
	if s.ProfilesSet {
		ch = append(ch, change{'+', fmt.Sprintf("profiles [%s]", strings.Join(s.Profiles, ", "))})
	}
	ch = slices.DeleteFunc(ch, func(x change) bool { return x.sign == '~' && strings.HasPrefix(x.text, "profiles:") })
	return renderChanges(head, ch) + waitNote(s) + "\n  rollback: delete the instance"
}

// waitNote tells in a plan that apply waits for an address.
func waitNote(s InstanceSpec) string {
	if s.WaitFor == "" {
		return ""
	}
	nic := "the first NIC"
	if s.NIC != "" {
		nic = "NIC " + s.NIC
	}
	return fmt.Sprintf("\n  then wait up to %s for an %s address of %s (wait_for)", orDefault(s.WaitTimeout, "2m"), strings.ToUpper(s.WaitFor[:2])+s.WaitFor[2:], nic)
}

// --- the cleanup guard

// guardDelete says whether deleting inst is allowed: instances that an
// incus_instance_state step kept for rollback stay until retain_until has
// passed.
func guardDelete(c *call, s InstanceSpec, inst *incusapi.Instance, now time.Time) phases.Diagnostics {
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

func planAbsent(c *call, s InstanceSpec, inst *incusapi.Instance) sdk.Plan[instancePrivate] {
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

func readInstance(ctx context.Context, c *call, s InstanceSpec, prior instPrior) sdk.Read[instanceInverse] {
	inst, _, err := getInstance(ctx, c, s.Name)
	if err != nil {
		return sdk.Read[instanceInverse]{Diagnostics: apiErr(c, "Cannot Read Instance", err)}
	}
	if s.Ensure == "absent" {
		if inst == nil {
			return sdk.Read[instanceInverse]{Observation: providers.Present, Outputs: instanceOut{Name: s.Name, Type: s.Type}}
		}
		return sdk.Read[instanceInverse]{Observation: providers.Absent, Detail: fmt.Sprintf("instance %q still exists", s.Name)}
	}
	if inst == nil {
		return sdk.Read[instanceInverse]{Observation: providers.Absent, Detail: fmt.Sprintf("instance %q does not exist", s.Name)}
	}
	pv := managedOf(prior)
	ch := instanceChanges(s, inst, pv.Config, pv.Devices)
	if inst.Type != s.Type {
		ch = append([]change{{'~', fmt.Sprintf("type: %q -> %q", inst.Type, s.Type)}}, ch...)
	}
	if len(ch) > 0 {
		return sdk.Read[instanceInverse]{Observation: providers.Drifted, Detail: renderChanges(fmt.Sprintf("instance %q differs from the step:", s.Name), ch)}
	}
	a, d := addresses(ctx, c, s.Name, inst, s.NIC)
	if d.HasErrors() {
		return sdk.Read[instanceInverse]{Diagnostics: d}
	}
	if a.Status == "Running" && !a.has(s.WaitFor) {
		// Created, but the run that waited for its address stopped first:
		// apply again, which waits.
		return sdk.Read[instanceInverse]{Observation: providers.Drifted, Detail: fmt.Sprintf("instance %q has no %s address yet (wait_for); last seen: %s", s.Name, s.WaitFor, a.Seen)}
	}
	r := sdk.Read[instanceInverse]{Observation: providers.Present, Outputs: a.outputs(s.Name, inst.Type), Identity: identityOf(inst)}
	if prior == nil && inst.Config[KeyCreatedBy] == c.Addr.String() {
		r.Inverse = deleteInverse(s.Name)
	}
	return r
}

func deleteInverse(name string) instInv {
	return &sdk.Inverse[instanceInverse]{
		Description: fmt.Sprintf("delete instance %s (stopped by force first)", name),
		Data:        instanceInverse{Op: "delete", Instance: name},
	}
}

// --- apply

func applyInstance(ctx context.Context, c *call, s InstanceSpec, planned instancePrivate, prior instPrior) instApply {
	inst, etag, err := getInstance(ctx, c, s.Name)
	if err != nil {
		return instApply{Diagnostics: apiErr(c, "Cannot Read Instance", err)}
	}
	if s.Ensure == "absent" {
		return applyAbsent(ctx, c, s, inst)
	}
	managed := instancePrivate{Config: slices.Sorted(maps.Keys(s.Config)), Devices: slices.Sorted(maps.Keys(s.Devices))}
	if inst == nil {
		if planned.Exists {
			return instApply{Diagnostics: errorf("Concurrent Change", "%s: instance %q existed when the plan was made and is gone now. Make a new plan.", c.Addr, s.Name)}
		}
		return createInstance(ctx, c, s, managed)
	}
	if inst.Type != s.Type {
		return instApply{Diagnostics: errorf("Instance Type Differs", "%s: instance %q is a %s, not a %s; Incus cannot change an instance's type.", c.Addr, s.Name, inst.Type, s.Type)}
	}
	ours := inst.Config[KeyCreatedBy] == c.Addr.String()
	if planned.ETag != "" {
		etag = planned.ETag // a change since the plan makes the daemon refuse the update
	} else if !planned.Exists && planned.Planned && !ours {
		return instApply{Diagnostics: errorf("Concurrent Change", "%s: instance %q did not exist when the plan was made, but exists now (made by someone else?). Make a new plan; migrate does not take over an instance it did not expect.", c.Addr, s.Name)}
	}
	pv := managedOf(prior)
	put, inv := updatedPut(s, inst, pv.Config, pv.Devices)
	ch := instanceChanges(s, inst, pv.Config, pv.Devices)
	if len(ch) > 0 {
		if err := c.Settings.c.UpdateInstance(ctx, s.Name, put, etag); err != nil {
			return instApply{Diagnostics: apiErr(c, "Cannot Update Instance", err)}
		}
		for _, x := range ch {
			logf(c, "instance %s: %c %s", s.Name, x.sign, x.text)
		}
	} else {
		logf(c, "instance %s already has the settings the step manages", s.Name)
	}
	if ours && s.Start && inst.Status != "Running" && inst.LastUsedAt.IsZero() {
		// Created by an earlier attempt that stopped before starting it.
		if err := setState(ctx, c, s.Name, incusapi.InstanceStatePut{Action: "start"}); err != nil {
			return instApply{Diagnostics: apiErr(c, "Cannot Start Instance", err)}
		}
		logf(c, "instance %s started", s.Name)
	}
	r := instApply{Private: managed}
	switch {
	case ours:
		r.Inverse = deleteInverse(s.Name)
	case len(ch) == 0 && prior != nil && prior.Inverse != nil:
		// Applied again (a wait cut by a stop, or one that failed): what
		// undoes the first apply stays, not "nothing to undo".
		r.Inverse = prior.Inverse
	case len(ch) == 0:
		r.Inverse = &sdk.Inverse[instanceInverse]{Description: fmt.Sprintf("nothing to undo: instance %s already had these settings", s.Name), Data: instanceInverse{Op: "none"}}
	default:
		inv.Instance = s.Name
		r.Inverse = &sdk.Inverse[instanceInverse]{Description: fmt.Sprintf("restore the previous config and devices of instance %s", s.Name), Data: inv}
	}
	return withAddresses(ctx, c, s, r)
}

// withAddresses completes a successful apply with the instance's status
// and addresses, waiting for the one wait_for names. A failed wait keeps
// the inverse: the instance is there, and rollback must undo it. So does
// a wait a gentle stop cut (Stopped): the next run applies again, which
// finds the instance and only waits.
func withAddresses(ctx context.Context, c *call, s InstanceSpec, r instApply) instApply {
	a, d, stopped := waitAddress(ctx, c, s)
	r.Diagnostics = append(r.Diagnostics, d...)
	r.Stopped = stopped
	r.Outputs = a.outputs(s.Name, s.Type)
	if inst, _, err := getInstance(context.WithoutCancel(ctx), c, s.Name); err == nil && inst != nil {
		r.Identity = identityOf(inst)
	}
	return r
}

// identityOf names the instance itself, not its name: the daemon gives
// every instance a UUID of its own (volatile.uuid), so one deleted and
// made again under the same name is another. Its records, and those of
// every step made on it, then describe the one before.
func identityOf(inst *incusapi.Instance) string {
	if id := inst.Config["volatile.uuid"]; id != "" {
		return "instance " + inst.Name + " " + id
	}
	return ""
}

// updatedPut returns the instance with the step's settings applied, and
// the inverse that restores the previous ones.
func updatedPut(s InstanceSpec, inst *incusapi.Instance, removedConfig, removedDevices []string) (incusapi.InstancePut, instanceInverse) {
	put := inst.Put()
	put.Config = maps.Clone(inst.Config)
	if put.Config == nil {
		put.Config = map[string]string{}
	}
	put.Devices = map[string]map[string]string{}
	for k, v := range inst.Devices {
		put.Devices[k] = maps.Clone(v)
	}
	inv := instanceInverse{Op: "restore", Config: map[string]*string{}, Devices: map[string]map[string]string{}}
	keep := func(k string, sens bool) {
		old, ok := inst.Config[k]
		switch {
		case !ok:
			inv.Config[k] = nil // absent before: removing it needs no secret
		case sens:
			inv.NotKept = append(inv.NotKept, "config "+k)
		default:
			inv.Config[k] = &old
		}
	}
	for k, v := range s.Config {
		if old, ok := inst.Config[k]; !ok || old != v {
			keep(k, s.SensitiveConfig[k])
			put.Config[k] = v
		}
	}
	for _, k := range removedConfig {
		if _, still := s.Config[k]; still {
			continue
		}
		if _, ok := inst.Config[k]; ok {
			keep(k, s.SensitiveConfig[k])
			delete(put.Config, k)
		}
	}
	keepDev := func(name string, sens bool) {
		if _, ok := inst.Devices[name]; ok && sens {
			inv.NotKept = append(inv.NotKept, "device "+name)
			return
		}
		inv.Devices[name] = maps.Clone(inst.Devices[name]) // nil when absent
	}
	for name, dev := range s.Devices {
		if old, ok := inst.Devices[name]; !ok || !maps.Equal(old, dev) {
			keepDev(name, s.SensitiveDevices[name])
			put.Devices[name] = maps.Clone(dev)
		}
	}
	for _, name := range removedDevices {
		if _, still := s.Devices[name]; still {
			continue
		}
		if _, ok := inst.Devices[name]; ok {
			keepDev(name, s.SensitiveDevices[name])
			delete(put.Devices, name)
		}
	}
	if s.ProfilesSet && !slices.Equal(s.Profiles, inst.Profiles) {
		inv.Profiles, inv.SetProfiles = slices.Clone(inst.Profiles), true
		put.Profiles = slices.Clone(s.Profiles)
	}
	sort.Strings(inv.NotKept)
	return put, inv
}

func createInstance(ctx context.Context, c *call, s InstanceSpec, managed instancePrivate) instApply {
	if d := needsSource(c, s); d != nil {
		return instApply{Diagnostics: d}
	}
	post := CreateRequest(s, c.Addr.String())
	start := time.Now()
	if err := c.Settings.c.CreateInstance(ctx, post); err != nil {
		if inst, _, gerr := getInstance(context.WithoutCancel(ctx), c, s.Name); gerr == nil && inst != nil && inst.Config[KeyCreatedBy] == c.Addr.String() {
			// The daemon created it before the failure (or the wait was
			// interrupted): the next run adopts it.
			logf(c, "instance %s was created, but: %v", s.Name, err)
		}
		from := fmt.Sprintf("from image %q (a local image: see `incus image list`)", s.Image)
		if s.Empty {
			from = "with an empty disk"
		}
		return instApply{Diagnostics: apiErr(c, "Cannot Create Instance", fmt.Errorf("creating %s %q %s: %w", s.Type, s.Name, from, err))}
	}
	logf(c, "instance %s created (%s) in %s", s.Name, s.Type, time.Since(start).Round(time.Millisecond))
	if s.Start {
		if err := setState(ctx, c, s.Name, incusapi.InstanceStatePut{Action: "start"}); err != nil {
			return instApply{Diagnostics: append(apiErr(c, "Cannot Start Instance", err), phases.Diagnostic{
				Severity: phases.Warning, Summary: "Instance Created But Not Started",
				Detail: fmt.Sprintf("Instance %s was created but did not start; the next run starts it (the instance is recorded as made by %s), and rollback deletes it.", s.Name, c.Addr)})}
		}
		logf(c, "instance %s started", s.Name)
	}
	return withAddresses(ctx, c, s, instApply{Private: managed, Inverse: deleteInverse(s.Name)})
}

// setState changes an instance's state; already being there is success.
func setState(ctx context.Context, c *call, name string, st incusapi.InstanceStatePut) error {
	err := c.Settings.c.SetState(ctx, name, st)
	if incusapi.IsAlreadyInState(err) || err != nil && settled(ctx, c, name, st.Action, err) {
		return nil
	}
	return err
}

// settleWait bounds how long settled watches an instance that a failed
// change says is already on its way: the daemon's status can lag behind
// liblxc's by a moment on a busy machine.
const settleWait = 20 * time.Second

// settled reports whether a state change that failed left the instance
// where it was asked to go anyway: another change finished first — a stop
// still in flight in the daemon from a run that was killed, say, or an init
// that exited on its own — which makes ours fail with "container is not
// running". The daemon may still say Running for a moment after liblxc
// said so; only then is the status watched for a while.
func settled(ctx context.Context, c *call, name, action string, err error) bool {
	want := map[string]string{"stop": "Stopped", "start": "Running"}[action]
	if want == "" {
		return false
	}
	msg := strings.ToLower(err.Error())
	racing := action == "stop" && strings.Contains(msg, "is not running")
	deadline := time.Now().Add(settleWait)
	for {
		st, err := c.Settings.c.InstanceState(ctx, name)
		if err != nil {
			return false
		}
		if st.Status == want {
			return true
		}
		if !racing || time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func applyAbsent(ctx context.Context, c *call, s InstanceSpec, inst *incusapi.Instance) instApply {
	out := instApply{Outputs: instanceOut{Name: s.Name, Type: s.Type}}
	if inst == nil {
		logf(c, "instance %s is already absent", s.Name)
		return out
	}
	if d := guardDelete(c, s, inst, time.Now()); d.HasErrors() {
		return instApply{Diagnostics: d}
	}
	if err := deleteInstance(ctx, c, s.Name, inst); err != nil {
		return instApply{Diagnostics: apiErr(c, "Cannot Delete Instance", err)}
	}
	logf(c, "instance %s deleted; this cannot be undone, rollback leaves it deleted", s.Name)
	out.Outputs = instanceOut{Name: s.Name, Type: inst.Type}
	return out
}

// deleteInstance stops an instance by force when it runs, then deletes it.
func deleteInstance(ctx context.Context, c *call, name string, inst *incusapi.Instance) error {
	if inst.Status != "Stopped" {
		if err := setState(ctx, c, name, incusapi.InstanceStatePut{Action: "stop", Force: true}); err != nil {
			return err
		}
	}
	err := c.Settings.c.DeleteInstance(ctx, name)
	if incusapi.IsNotFound(err) {
		return nil
	}
	return err
}

// --- revert

func revertInstance(ctx context.Context, c *call, a InstanceSpec, u sdk.Undo[instanceInverse]) phases.Diagnostics {
	inv := u.Data
	name := pick(inv.Instance, orDefault(a.Name, c.Addr.Name))
	switch inv.Op {
	case "none":
		return nil
	case "delete":
		inst, _, err := getInstance(ctx, c, name)
		if err != nil {
			return apiErr(c, "Cannot Read Instance", err)
		}
		if inst == nil {
			logf(c, "instance %s is already gone", name)
			return nil
		}
		if err := deleteInstance(ctx, c, name, inst); err != nil {
			return apiErr(c, "Cannot Delete Instance", err)
		}
		logf(c, "instance %s deleted", name)
		return nil
	case "restore":
		return restoreInstance(ctx, c, name, inv)
	}
	return errorf("Invalid Inverse", "The inverse of %s has an unknown operation %q.", c.Addr, inv.Op)
}

func restoreInstance(ctx context.Context, c *call, name string, inv instanceInverse) phases.Diagnostics {
	var diags phases.Diagnostics
	for attempt := 1; ; attempt++ {
		inst, etag, err := getInstance(ctx, c, name)
		if err != nil {
			return apiErr(c, "Cannot Read Instance", err)
		}
		if inst == nil {
			return unknownInstance(c, name, " Its previous settings cannot be restored.")
		}
		put := inst.Put()
		put.Config = maps.Clone(inst.Config)
		if put.Config == nil {
			put.Config = map[string]string{}
		}
		put.Devices = maps.Clone(inst.Devices)
		if put.Devices == nil {
			put.Devices = map[string]map[string]string{}
		}
		for k, v := range inv.Config {
			if v == nil {
				delete(put.Config, k)
			} else {
				put.Config[k] = *v
			}
		}
		for k, v := range inv.Devices {
			if v == nil {
				delete(put.Devices, k)
			} else {
				put.Devices[k] = v
			}
		}
		if inv.SetProfiles {
			put.Profiles = inv.Profiles
		}
		err = c.Settings.c.UpdateInstance(ctx, name, put, etag)
		if errors.Is(err, incusapi.ErrConflict) && attempt < 3 {
			continue // changed between our read and write: read again
		}
		if err != nil {
			return apiErr(c, "Cannot Restore Instance", err)
		}
		break
	}
	logf(c, "instance %s: previous config and devices restored", name)
	if len(inv.NotKept) > 0 {
		diags = append(diags, phases.Diagnostic{Severity: phases.Warning, Summary: "Sensitive Settings Not Restored",
			Detail: fmt.Sprintf("The previous values of %s on instance %s were sensitive, so the state did not keep them; they keep the runbook's values.", strings.Join(inv.NotKept, ", "), name)})
	}
	return diags
}
