package incus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// InstanceSpec is an incus_instance step, decoded.
type InstanceSpec struct {
	Name        string
	Ensure      string // "present" or "absent"
	Type        string // "virtual-machine" or "container"
	Image       string
	Empty       bool
	CPU         string
	Memory      string
	Profiles    []string
	ProfilesSet bool
	Config      map[string]string
	Devices     map[string]map[string]string
	Start       bool
	Description string
	RetainUntil string

	// Sensitive config keys and devices (any of whose keys is sensitive).
	SensitiveConfig  map[string]bool
	SensitiveDevices map[string]bool
	// Known is false when some setting depends on steps not run yet.
	Known bool
}

// retainLayout is the format of retain_until.
const retainLayout = "2006-01-02"

var instanceNameRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9-]{0,62}$`)

// decodeInstance reads and checks an incus_instance step.
func (c *call) decodeInstance() InstanceSpec {
	s := InstanceSpec{SensitiveConfig: map[string]bool{}, SensitiveDevices: map[string]bool{}}
	known := c.known()
	k := func(ok bool) {
		if !ok {
			known = false
		}
	}
	var ok bool
	s.Name, ok = c.str("name", c.addr.Name)
	k(ok)
	s.Ensure, ok = c.str("ensure", "present")
	k(ok)
	s.Type, ok = c.str("type", "virtual-machine")
	k(ok)
	s.Image, ok = c.str("image", "")
	k(ok)
	s.Empty, ok = c.boolean("empty", false)
	k(ok)
	s.CPU, ok = c.number("cpu")
	k(ok)
	s.Memory, ok = c.str("memory", "")
	k(ok)
	s.Profiles, s.ProfilesSet, ok = c.strs("profiles")
	k(ok)
	s.Config, ok = c.strMap("config")
	k(ok)
	s.Devices, ok = c.devMap("devices")
	k(ok)
	s.Start, ok = c.boolean("start", false)
	k(ok)
	s.Description, ok = c.str("description", "")
	k(ok)
	s.RetainUntil, ok = c.str("retain_until", "")
	k(ok)
	s.Known = known
	if !c.known() {
		return s
	}
	if s.Config == nil {
		s.Config = map[string]string{}
	}
	for key := range s.Config {
		if c.sensitive("config", key) {
			s.SensitiveConfig[key] = true
		}
	}
	if s.CPU != "" {
		if _, dup := s.Config["limits.cpu"]; dup {
			c.errorf("Conflicting Attributes", "%s sets both cpu and config[\"limits.cpu\"]; keep one.", c.what)
		}
		s.Config["limits.cpu"] = s.CPU
		if c.sensitive("cpu") {
			s.SensitiveConfig["limits.cpu"] = true
		}
	}
	if s.Memory != "" {
		if _, dup := s.Config["limits.memory"]; dup {
			c.errorf("Conflicting Attributes", "%s sets both memory and config[\"limits.memory\"]; keep one.", c.what)
		}
		s.Config["limits.memory"] = s.Memory
		if c.sensitive("memory") {
			s.SensitiveConfig["limits.memory"] = true
		}
	}
	for key := range s.Config {
		if strings.HasPrefix(key, "user.migrate.") {
			c.errorf("Reserved Config Key", "%s sets %q: the user.migrate.* keys are migrate's own marks (kept for rollback, created by); use another user.* key.", c.what, key)
		}
	}
	if s.Devices == nil {
		s.Devices = map[string]map[string]string{}
	}
	for name, dev := range s.Devices {
		if c.sensitive("devices", name) {
			s.SensitiveDevices[name] = true
		}
		if t, ok := dev["type"]; dev != nil && (!ok || t == "") {
			c.errorf("Invalid Device", "Device %q of %s has no type: every device needs one, such as type = \"disk\" or type = \"gpu\".", name, c.what)
		}
	}
	if known {
		c.checkInstance(&s)
	}
	return s
}

func (c *call) checkInstance(s *InstanceSpec) {
	if !instanceNameRE.MatchString(s.Name) {
		c.errorf("Invalid Instance Name", "%q is not a valid instance name for %s: use letters, digits and dashes, starting with a letter, at most 63 characters (set name when the step's own name does not fit).", s.Name, c.what)
	}
	switch s.Ensure {
	case "present", "absent":
	default:
		c.errorf("Invalid Attribute Value", "The \"ensure\" attribute of %s must be \"present\" or \"absent\", not %q.", c.what, s.Ensure)
	}
	switch s.Type {
	case "virtual-machine", "container":
	default:
		c.errorf("Invalid Attribute Value", "The \"type\" attribute of %s must be \"virtual-machine\" or \"container\", not %q.", c.what, s.Type)
	}
	if s.Image != "" && s.Empty {
		c.errorf("Conflicting Attributes", "%s sets both image and empty = true: an instance starts either from an image or from an empty disk.", c.what)
	}
	if s.Empty && s.Type == "container" {
		c.errorf("Invalid Attribute Value", "%s: empty = true is for virtual machines (installed from an iso device); a container needs an image.", c.what)
	}
	if s.RetainUntil != "" {
		if _, err := time.ParseInLocation(retainLayout, s.RetainUntil, time.Local); err != nil {
			c.errorf("Invalid Attribute Value", "The \"retain_until\" attribute of %s must be a date as YYYY-MM-DD, such as \"2026-12-31\", not %q.", c.what, s.RetainUntil)
		}
		if s.Ensure == "present" {
			c.diags = append(c.diags, phases.Diagnostic{Severity: phases.Warning, Summary: "Attribute Ignored",
				Detail: fmt.Sprintf("retain_until of %s only applies with ensure = \"absent\"; it is ignored.", c.what)})
		}
	}
}

// DesiredConfig is the config the step manages: its config keys and the
// cpu and memory limits.
func (s InstanceSpec) DesiredConfig() map[string]string { return s.Config }

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
	ETag    string   `json:"etag,omitempty"`
	Exists  bool     `json:"exists,omitempty"`
	Config  []string `json:"managed_config,omitempty"`
	Devices []string `json:"managed_devices,omitempty"`
}

func priorManaged(prior *providers.Prior) instancePrivate {
	var pv instancePrivate
	if prior != nil && len(prior.Private) > 0 {
		_ = json.Unmarshal(prior.Private, &pv)
	}
	return pv
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
	for _, k := range sortedKeys(s.Config) {
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
	for _, name := range sortedKeys(s.Devices) {
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
	for _, k := range sortedKeys(dev) {
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
	for _, k := range sortedKeys(keys) {
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

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// unknownInstance is the diagnostic of an instance that does not exist.
func (c *call) unknownInstance(name string, hint string) phases.Diagnostics {
	return phases.Errorf("Unknown Instance", "%s: Incus at %s has no instance %q%s.%s", c.addr, c.p.s.where, name, c.projectNote(), hint)
}

func (c *call) projectNote() string {
	if c.p.s.opts.Project != "" {
		return fmt.Sprintf(" in project %q", c.p.s.opts.Project)
	}
	return ""
}

// getInstance reads an instance; nil without error when it does not exist.
func (c *call) getInstance(ctx context.Context, name string) (*incusapi.Instance, string, error) {
	inst, etag, err := c.c.Instance(ctx, name)
	if incusapi.IsNotFound(err) {
		return nil, "", nil
	}
	return inst, etag, err
}

// --- plan

func (c *call) planInstance(ctx context.Context, req providers.PlanRequest) providers.PlanResponse {
	s := c.decodeInstance()
	if c.diags.HasErrors() {
		return providers.PlanResponse{}
	}
	if !s.Known || !c.known() {
		return providers.PlanResponse{Diff: "create or update an instance (its settings are known after earlier steps run)"}
	}
	inst, etag, err := c.getInstance(ctx, s.Name)
	if err != nil {
		return providers.PlanResponse{Diagnostics: c.apiErr("Cannot Read Instance", err)}
	}
	if s.Ensure == "absent" {
		return c.planAbsent(s, inst)
	}
	if inst == nil {
		if s.Image == "" && !s.Empty {
			c.errorf("Missing Attribute", "%s creates instance %q, so it needs image (a local image alias or fingerprint) or empty = true (for a VM installed from an iso device).", c.what, s.Name)
			return providers.PlanResponse{}
		}
		return providers.PlanResponse{Diff: createDiff(s), Private: marshal(instancePrivate{})}
	}
	if inst.Type != s.Type {
		c.errorf("Instance Type Differs", "%s: instance %q is a %s, but the step says type = %q. Incus cannot change an instance's type: fix the step, or delete the instance first.", c.addr, s.Name, inst.Type, s.Type)
		return providers.PlanResponse{}
	}
	pv := priorManaged(req.Prior)
	ch := instanceChanges(s, inst, pv.Config, pv.Devices)
	priv := marshal(instancePrivate{ETag: etag, Exists: true})
	if len(ch) == 0 {
		return providers.PlanResponse{Diff: fmt.Sprintf("instance %q (%s, %s) already has the settings the step manages: nothing to change", s.Name, s.Type, strings.ToLower(inst.Status)), Private: priv}
	}
	head := fmt.Sprintf("~ update %s %q (%s) with the ETag read now; a change made meanwhile is refused, not overwritten", s.Type, s.Name, strings.ToLower(inst.Status))
	return providers.PlanResponse{Diff: renderChanges(head, ch), Private: priv}
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
	return renderChanges(head, ch) + "\n  rollback: delete the instance"
}

// --- the cleanup guard

// guardDelete says whether deleting inst is allowed: instances that an
// incus_instance_state step kept for rollback stay until retain_until has
// passed.
func (c *call) guardDelete(s InstanceSpec, inst *incusapi.Instance, now time.Time) phases.Diagnostics {
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
			c.addr, s.Name, since, by, KeyKeepForRollback)
	}
	until, err := time.ParseInLocation(retainLayout, s.RetainUntil, time.Local)
	if err != nil {
		return nil // reported by checkInstance
	}
	if !now.Before(until.AddDate(0, 0, 1)) {
		return nil
	}
	return phases.Errorf("Instance Retained Until "+s.RetainUntil,
		"%s would delete instance %q, which migrate stopped%s%s and keeps for rollback; the step says retain_until = %q, and today is %s. The deletion is refused until that date has passed: run this phase again from %s, or move retain_until earlier if you no longer need the way back.",
		c.addr, s.Name, since, by, s.RetainUntil, now.Format(retainLayout), until.AddDate(0, 0, 1).Format(retainLayout))
}

func (c *call) planAbsent(s InstanceSpec, inst *incusapi.Instance) providers.PlanResponse {
	if inst == nil {
		return providers.PlanResponse{Diff: fmt.Sprintf("instance %q is already absent: nothing to delete", s.Name)}
	}
	if d := c.guardDelete(s, inst, time.Now()); d.HasErrors() {
		return providers.PlanResponse{Diagnostics: d}
	}
	head := fmt.Sprintf("- delete %s %q (%s", inst.Type, s.Name, strings.ToLower(inst.Status))
	if inst.Status == "Running" {
		head += ", stopped by force first"
	}
	head += ")"
	if inst.Config[KeyKeepForRollback] == "true" {
		head += fmt.Sprintf("\n  it was kept for rollback since %s; retain_until %s has passed", firstNonEmpty(inst.Config[KeyStoppedAt], "its stop"), s.RetainUntil)
	}
	return providers.PlanResponse{Diff: head + "\n  irreversible: a deleted instance and its snapshots cannot be brought back, so rollback cannot start it again",
		Irreversible: "a deleted instance and its snapshots cannot be brought back"}
}

// --- read

func (c *call) readInstance(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
	s := c.decodeInstance()
	if c.diags.HasErrors() || !s.Known || !c.known() {
		return providers.ReadResponse{Observation: providers.Unknown}
	}
	inst, _, err := c.getInstance(ctx, s.Name)
	if err != nil {
		return providers.ReadResponse{Diagnostics: c.apiErr("Cannot Read Instance", err)}
	}
	if s.Ensure == "absent" {
		if inst == nil {
			return providers.ReadResponse{Observation: providers.Present, Outputs: instanceOutputs(s.Name, s.Type)}
		}
		return providers.ReadResponse{Observation: providers.Absent, Detail: fmt.Sprintf("instance %q still exists", s.Name)}
	}
	if inst == nil {
		return providers.ReadResponse{Observation: providers.Absent, Detail: fmt.Sprintf("instance %q does not exist", s.Name)}
	}
	pv := priorManaged(req.Prior)
	ch := instanceChanges(s, inst, pv.Config, pv.Devices)
	if inst.Type != s.Type {
		ch = append([]change{{'~', fmt.Sprintf("type: %q -> %q", inst.Type, s.Type)}}, ch...)
	}
	if len(ch) > 0 {
		return providers.ReadResponse{Observation: providers.Drifted, Detail: renderChanges(fmt.Sprintf("instance %q differs from the step:", s.Name), ch)}
	}
	r := providers.ReadResponse{Observation: providers.Present, Outputs: instanceOutputs(s.Name, inst.Type)}
	if req.Prior == nil && inst.Config[KeyCreatedBy] == c.addr.String() {
		r.Inverse = deleteInverse(s.Name)
	}
	return r
}

func instanceOutputs(name, typ string) cty.Value {
	return cty.ObjectVal(map[string]cty.Value{"name": cty.StringVal(name), "type": cty.StringVal(typ)})
}

func deleteInverse(name string) *providers.Inverse {
	return &providers.Inverse{
		Description: fmt.Sprintf("delete instance %s (stopped by force first)", name),
		Data:        marshal(instanceInverse{Op: "delete", Instance: name}),
	}
}

// --- apply

func (c *call) applyInstance(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
	s := c.decodeInstance()
	if c.diags.HasErrors() {
		return providers.ApplyResponse{}
	}
	if !s.Known || !c.known() {
		c.errorf("Unknown Attribute Values", "%s cannot run: some of its settings are still unknown.", c.what)
		return providers.ApplyResponse{}
	}
	var planned instancePrivate
	if len(req.Planned) > 0 {
		_ = json.Unmarshal(req.Planned, &planned)
	}
	inst, etag, err := c.getInstance(ctx, s.Name)
	if err != nil {
		return providers.ApplyResponse{Diagnostics: c.apiErr("Cannot Read Instance", err)}
	}
	if s.Ensure == "absent" {
		return c.applyAbsent(ctx, s, inst)
	}
	managed := instancePrivate{Config: sortedKeys(s.Config), Devices: sortedKeys(s.Devices)}
	if inst == nil {
		if planned.Exists {
			return providers.ApplyResponse{Diagnostics: phases.Errorf("Concurrent Change", "%s: instance %q existed when the plan was made and is gone now. Make a new plan.", c.addr, s.Name)}
		}
		return c.createInstance(ctx, s, managed)
	}
	if inst.Type != s.Type {
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Instance Type Differs", "%s: instance %q is a %s, not a %s; Incus cannot change an instance's type.", c.addr, s.Name, inst.Type, s.Type)}
	}
	ours := inst.Config[KeyCreatedBy] == c.addr.String()
	if planned.ETag != "" {
		etag = planned.ETag // a change since the plan makes the daemon refuse the update
	} else if !planned.Exists && len(req.Planned) > 0 && !ours {
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Concurrent Change", "%s: instance %q did not exist when the plan was made, but exists now (made by someone else?). Make a new plan; migrate does not take over an instance it did not expect.", c.addr, s.Name)}
	}
	pv := priorManaged(req.Prior)
	put, inv := updatedPut(s, inst, pv.Config, pv.Devices)
	ch := instanceChanges(s, inst, pv.Config, pv.Devices)
	if len(ch) > 0 {
		if err := c.c.UpdateInstance(ctx, s.Name, put, etag); err != nil {
			return providers.ApplyResponse{Diagnostics: c.apiErr("Cannot Update Instance", err)}
		}
		for _, x := range ch {
			c.logf("instance %s: %c %s", s.Name, x.sign, x.text)
		}
	} else {
		c.logf("instance %s already has the settings the step manages", s.Name)
	}
	if ours && s.Start && inst.Status != "Running" && inst.LastUsedAt.IsZero() {
		// Created by an earlier attempt that stopped before starting it.
		if err := c.setState(ctx, s.Name, incusapi.InstanceStatePut{Action: "start"}); err != nil {
			return providers.ApplyResponse{Diagnostics: c.apiErr("Cannot Start Instance", err)}
		}
		c.logf("instance %s started", s.Name)
	}
	r := providers.ApplyResponse{Outputs: instanceOutputs(s.Name, inst.Type), Private: marshal(managed)}
	switch {
	case ours:
		r.Inverse = deleteInverse(s.Name)
	case len(ch) == 0:
		r.Inverse = &providers.Inverse{Description: fmt.Sprintf("nothing to undo: instance %s already had these settings", s.Name), Data: marshal(instanceInverse{Op: "none"})}
	default:
		inv.Instance = s.Name
		r.Inverse = &providers.Inverse{Description: fmt.Sprintf("restore the previous config and devices of instance %s", s.Name), Data: marshal(inv)}
	}
	return r
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

func (c *call) createInstance(ctx context.Context, s InstanceSpec, managed instancePrivate) providers.ApplyResponse {
	if s.Image == "" && !s.Empty {
		c.errorf("Missing Attribute", "%s creates instance %q, so it needs image (a local image alias or fingerprint) or empty = true (for a VM installed from an iso device).", c.what, s.Name)
		return providers.ApplyResponse{}
	}
	post := CreateRequest(s, c.addr.String())
	start := time.Now()
	if err := c.c.CreateInstance(ctx, post); err != nil {
		if inst, _, gerr := c.getInstance(context.WithoutCancel(ctx), s.Name); gerr == nil && inst != nil && inst.Config[KeyCreatedBy] == c.addr.String() {
			// The daemon created it before the failure (or the wait was
			// interrupted): the next run adopts it.
			c.logf("instance %s was created, but: %v", s.Name, err)
		}
		from := fmt.Sprintf("from image %q (a local image: see `incus image list`)", s.Image)
		if s.Empty {
			from = "with an empty disk"
		}
		return providers.ApplyResponse{Diagnostics: c.apiErr("Cannot Create Instance", fmt.Errorf("creating %s %q %s: %w", s.Type, s.Name, from, err))}
	}
	c.logf("instance %s created (%s) in %s", s.Name, s.Type, time.Since(start).Round(time.Millisecond))
	if s.Start {
		if err := c.setState(ctx, s.Name, incusapi.InstanceStatePut{Action: "start"}); err != nil {
			return providers.ApplyResponse{Diagnostics: append(c.apiErr("Cannot Start Instance", err), phases.Diagnostic{
				Severity: phases.Warning, Summary: "Instance Created But Not Started",
				Detail: fmt.Sprintf("Instance %s was created but did not start; the next run starts it (the instance is recorded as made by %s), and rollback deletes it.", s.Name, c.addr)})}
		}
		c.logf("instance %s started", s.Name)
	}
	return providers.ApplyResponse{
		Outputs: instanceOutputs(s.Name, s.Type),
		Private: marshal(managed),
		Inverse: deleteInverse(s.Name),
	}
}

// setState changes an instance's state; already being there is success.
func (c *call) setState(ctx context.Context, name string, st incusapi.InstanceStatePut) error {
	err := c.c.SetState(ctx, name, st)
	if incusapi.IsAlreadyInState(err) || err != nil && c.settled(ctx, name, st.Action) {
		return nil
	}
	return err
}

// settled reports whether a state change that failed left the instance
// where it was asked to go anyway: another change finished first — a stop
// still in flight in the daemon from a run that was killed, say, which
// makes ours fail with "container is not running".
func (c *call) settled(ctx context.Context, name, action string) bool {
	st, err := c.c.InstanceState(ctx, name)
	if err != nil {
		return false
	}
	switch action {
	case "stop":
		return st.Status == "Stopped"
	case "start":
		return st.Status == "Running"
	}
	return false
}

func (c *call) applyAbsent(ctx context.Context, s InstanceSpec, inst *incusapi.Instance) providers.ApplyResponse {
	out := providers.ApplyResponse{Outputs: instanceOutputs(s.Name, s.Type)}
	if inst == nil {
		c.logf("instance %s is already absent", s.Name)
		return out
	}
	if d := c.guardDelete(s, inst, time.Now()); d.HasErrors() {
		return providers.ApplyResponse{Diagnostics: d}
	}
	if err := c.deleteInstance(ctx, s.Name, inst); err != nil {
		return providers.ApplyResponse{Diagnostics: c.apiErr("Cannot Delete Instance", err)}
	}
	c.logf("instance %s deleted; this cannot be undone, rollback leaves it deleted", s.Name)
	out.Outputs = instanceOutputs(s.Name, inst.Type)
	return out
}

// deleteInstance stops an instance by force when it runs, then deletes it.
func (c *call) deleteInstance(ctx context.Context, name string, inst *incusapi.Instance) error {
	if inst.Status != "Stopped" {
		if err := c.setState(ctx, name, incusapi.InstanceStatePut{Action: "stop", Force: true}); err != nil {
			return err
		}
	}
	err := c.c.DeleteInstance(ctx, name)
	if incusapi.IsNotFound(err) {
		return nil
	}
	return err
}

// --- revert

func (c *call) revertInstance(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
	var inv instanceInverse
	if err := json.Unmarshal(req.Inverse.Data, &inv); err != nil {
		return providers.RevertResponse{Diagnostics: phases.Errorf("Invalid Inverse", "The inverse of %s recorded in state cannot be read: %v.", c.addr, err)}
	}
	cfgName, _ := c.str("name", c.addr.Name)
	name := pick(inv.Instance, cfgName)
	switch inv.Op {
	case "none":
		return providers.RevertResponse{}
	case "delete":
		inst, _, err := c.getInstance(ctx, name)
		if err != nil {
			return providers.RevertResponse{Diagnostics: c.apiErr("Cannot Read Instance", err)}
		}
		if inst == nil {
			c.logf("instance %s is already gone", name)
			return providers.RevertResponse{}
		}
		if err := c.deleteInstance(ctx, name, inst); err != nil {
			return providers.RevertResponse{Diagnostics: c.apiErr("Cannot Delete Instance", err)}
		}
		c.logf("instance %s deleted", name)
		return providers.RevertResponse{}
	case "restore":
		return c.restoreInstance(ctx, name, inv)
	}
	return providers.RevertResponse{Diagnostics: phases.Errorf("Invalid Inverse", "The inverse of %s has an unknown operation %q.", c.addr, inv.Op)}
}

func (c *call) restoreInstance(ctx context.Context, name string, inv instanceInverse) providers.RevertResponse {
	var diags phases.Diagnostics
	for attempt := 1; ; attempt++ {
		inst, etag, err := c.getInstance(ctx, name)
		if err != nil {
			return providers.RevertResponse{Diagnostics: c.apiErr("Cannot Read Instance", err)}
		}
		if inst == nil {
			return providers.RevertResponse{Diagnostics: c.unknownInstance(name, " Its previous settings cannot be restored.")}
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
		err = c.c.UpdateInstance(ctx, name, put, etag)
		if errors.Is(err, incusapi.ErrConflict) && attempt < 3 {
			continue // changed between our read and write: read again
		}
		if err != nil {
			return providers.RevertResponse{Diagnostics: c.apiErr("Cannot Restore Instance", err)}
		}
		break
	}
	c.logf("instance %s: previous config and devices restored", name)
	if len(inv.NotKept) > 0 {
		diags = append(diags, phases.Diagnostic{Severity: phases.Warning, Summary: "Sensitive Settings Not Restored",
			Detail: fmt.Sprintf("The previous values of %s on instance %s were sensitive, so the state did not keep them; they keep the runbook's values.", strings.Join(inv.NotKept, ", "), name)})
	}
	return providers.RevertResponse{Diagnostics: diags}
}
