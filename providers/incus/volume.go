package incus

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// volumeSpec is an incus_volume step: a custom storage volume.
type volumeSpec struct {
	Pool        string            `cty:"pool" doc:"The storage pool; by default the pool of the default profile's root disk, as Incus chooses (\"default\" on a plain install, \"local\" on IncusOS). It must exist on the host."`
	Name        string            `cty:"name" doc:"The volume name; default the step's name."`
	Size        string            `cty:"size" doc:"The volume size (its size config key), such as \"150GiB\"; the pool's default when unset."`
	ContentType string            `cty:"content_type" doc:"\"filesystem\" (default), \"block\" (for a VM's extra disk) or \"iso\" (with source_file); it cannot change once created."`
	SourceFile  string            `cty:"source_file" doc:"A file to import as the volume, as incus storage volume import does (content_type \"iso\", the default with it): the Talos ISO need not sit on the host. Relative to the runbook; a changed file plans an update, which imports it again."`
	Config      map[string]string `cty:"config" doc:"Volume config keys, such as snapshots.schedule; only the keys listed are managed."`

	poolChosen bool              // Pool was unset: the default profile's root disk pool
	want       map[string]string // Config with size
	sens       map[string]bool   // sensitive keys of want
	path       string            // SourceFile, absolute
}

// volumeOut is the outputs of an incus_volume step: what a disk device
// names ({type="disk", pool=..., source=...}).
type volumeOut struct {
	Pool string `cty:"pool"`
	Name string `cty:"name"`
}

// volumeRevert is how to undo an incus_volume step.
type volumeRevert struct {
	Op   string `json:"op"` // "delete", "restore" or "none"
	Pool string `json:"pool,omitempty"`
	Name string `json:"name,omitempty"`
	// Config holds the previous value of each key changed; null: absent.
	Config map[string]*string `json:"config,omitempty"`
	// NotKept lists the keys whose previous value was sensitive.
	NotKept []string `json:"not_kept,omitempty"`
}

type volApply = sdk.Apply[struct{}, volumeRevert]

// Volume is the name of the incus_volume step type.
const Volume = "incus_volume"

var volumeStep = &sdk.StepType[*conn, volumeSpec, struct{}, volumeRevert]{
	Name:        Volume,
	Description: "Ensures a custom storage volume exists in a pool with the given content type, size and config; rollback deletes the volume it created, or restores the config it changed.",
	Rollback:    "Deletes the volume it created, or restores the config it changed.",
	Outputs:     volumeOut{},
	Validate:    validateVolume,
	Read:        readVolume,
	Plan:        planVolume,
	Apply:       applyVolume,
	Revert:      revertVolume,
	Digest:      digestVolume,
}

func validateVolume(c *call, s *volumeSpec) phases.Diagnostics {
	var diags phases.Diagnostics
	s.Name = orDefault(s.Name, c.Addr.Name)
	if s.SourceFile != "" {
		return append(diags, validateImport(c, s)...)
	}
	s.ContentType = orDefault(s.ContentType, "filesystem")
	if s.ContentType != "filesystem" && s.ContentType != "block" {
		diags = append(diags, errorf("Invalid Attribute Value", "The \"content_type\" attribute of %s must be \"filesystem\" or \"block\" (or \"iso\" with source_file, the file to import), not %q.", c.Addr, s.ContentType)...)
	}
	if strings.Contains(s.Name, "/") || strings.Contains(s.Pool, "/") {
		diags = append(diags, errorf("Invalid Attribute Value", "The volume %q in pool %q of %s: names may not contain \"/\".", s.Name, s.Pool, c.Addr)...)
	}
	s.want, s.sens = maps.Clone(s.Config), map[string]bool{}
	if s.want == nil {
		s.want = map[string]string{}
	}
	for k := range s.want {
		s.sens[k] = c.Sensitive("config", k)
		if strings.HasPrefix(k, "user.migrate.") {
			diags = append(diags, errorf("Reserved Config Key", "%s sets %q: the user.migrate.* keys are migrate's own marks; use another user.* key.", c.Addr, k)...)
		}
	}
	if s.Size != "" {
		if _, dup := s.want["size"]; dup {
			diags = append(diags, errorf("Conflicting Attributes", "%s sets both size and config[\"size\"]; keep one.", c.Addr)...)
		}
		s.want["size"], s.sens["size"] = s.Size, c.Sensitive("size")
	}
	return diags
}

// getVolume reads a volume; nil without error when it does not exist.
func getVolume(ctx context.Context, c *call, s volumeSpec) (*incusapi.StorageVolume, string, error) {
	v, etag, err := c.Settings.c.StorageVolume(ctx, s.Pool, s.Name)
	if incusapi.IsNotFound(err) {
		return nil, "", nil
	}
	return v, etag, err
}

// volumeChanges compares the managed config with the live volume's.
func volumeChanges(s volumeSpec, have map[string]string) []change {
	var out []change
	for _, k := range slices.Sorted(maps.Keys(s.want)) {
		old, ok := have[k]
		switch {
		case !ok:
			out = append(out, change{'+', fmt.Sprintf("config %s = %s", k, show(s.want[k], s.sens[k]))})
		case old != s.want[k]:
			out = append(out, change{'~', fmt.Sprintf("config %s: %s -> %s", k, show(old, s.sens[k]), show(s.want[k], s.sens[k]))})
		}
	}
	return out
}

func readVolume(ctx context.Context, c *call, s volumeSpec, prior *sdk.Prior[struct{}, volumeRevert]) sdk.Read[volumeRevert] {
	if d := choosePool(ctx, c, &s); d.HasErrors() {
		return sdk.Read[volumeRevert]{Diagnostics: d}
	}
	if s.path != "" {
		return readImport(ctx, c, s, prior)
	}
	v, _, err := getVolume(ctx, c, s)
	if err != nil {
		return sdk.Read[volumeRevert]{Diagnostics: apiErr(c, "Cannot Read Volume", err)}
	}
	if v == nil {
		return sdk.Read[volumeRevert]{Observation: providers.Absent, Detail: fmt.Sprintf("volume %q does not exist in pool %q", s.Name, s.Pool)}
	}
	if ch := volumeChanges(s, v.Config); len(ch) > 0 || v.ContentType != s.ContentType {
		if v.ContentType != s.ContentType {
			ch = append([]change{{'~', fmt.Sprintf("content_type: %q -> %q", v.ContentType, s.ContentType)}}, ch...)
		}
		return sdk.Read[volumeRevert]{Observation: providers.Drifted, Detail: renderChanges(fmt.Sprintf("volume %q differs from the step:", s.Name), ch)}
	}
	r := sdk.Read[volumeRevert]{Observation: providers.Present, Outputs: volumeOut{s.Pool, s.Name}}
	if prior == nil && v.Config[KeyCreatedBy] == c.Addr.String() {
		r.Revert = deleteVolume(s)
	}
	return r
}

func planVolume(ctx context.Context, c *call, s volumeSpec, _ *sdk.Prior[struct{}, volumeRevert]) sdk.Plan[struct{}] {
	if d := choosePool(ctx, c, &s); d.HasErrors() {
		return sdk.Plan[struct{}]{Diagnostics: d}
	}
	if s.path != "" {
		return planImport(ctx, c, s)
	}
	v, _, err := getVolume(ctx, c, s)
	if err != nil {
		return sdk.Plan[struct{}]{Diagnostics: apiErr(c, "Cannot Read Volume", err)}
	}
	if v == nil {
		if d := volumePool(ctx, c, s); d.HasErrors() {
			return sdk.Plan[struct{}]{Diagnostics: d}
		}
		head := fmt.Sprintf("+ create %s volume %q in pool %q%s", s.ContentType, s.Name, s.Pool, chosenNote(s))
		return sdk.Plan[struct{}]{Diff: renderChanges(head, volumeChanges(s, nil)) + "\n  rollback: delete the volume"}
	}
	if d := sameContent(c, s, v); d != nil {
		return sdk.Plan[struct{}]{Diagnostics: d}
	}
	ch := volumeChanges(s, v.Config)
	if len(ch) == 0 {
		return sdk.Plan[struct{}]{Diff: fmt.Sprintf("volume %q in pool %q%s already has the settings the step manages: nothing to change", s.Name, s.Pool, chosenNote(s))}
	}
	head := fmt.Sprintf("~ update volume %q in pool %q%s", s.Name, s.Pool, chosenNote(s))
	return sdk.Plan[struct{}]{Diff: renderChanges(head, ch) + "\n  rollback: restore the previous config"}
}

// sameContent refuses a volume whose content type differs: Incus cannot
// change it.
func sameContent(c *call, s volumeSpec, v *incusapi.StorageVolume) phases.Diagnostics {
	if v.ContentType == s.ContentType {
		return nil
	}
	return errorf("Volume Content Type Differs", "%s: volume %q in pool %q holds %s content, but the step says content_type = %q. Incus cannot change it: fix the step, or delete the volume first.", c.Addr, s.Name, s.Pool, v.ContentType, s.ContentType)
}

func deleteVolume(s volumeSpec) *sdk.RevertData[volumeRevert] {
	return &sdk.RevertData[volumeRevert]{Description: fmt.Sprintf("delete volume %s of pool %s", s.Name, s.Pool), Data: volumeRevert{Op: "delete", Pool: s.Pool, Name: s.Name}}
}

func applyVolume(ctx context.Context, c *call, s volumeSpec, _ struct{}, _ *sdk.Prior[struct{}, volumeRevert]) volApply {
	if d := choosePool(ctx, c, &s); d.HasErrors() {
		return volApply{Diagnostics: d}
	}
	if s.path != "" {
		return applyImport(ctx, c, s)
	}
	v, etag, err := getVolume(ctx, c, s)
	if err != nil {
		return volApply{Diagnostics: apiErr(c, "Cannot Read Volume", err)}
	}
	out := volumeOut{s.Pool, s.Name}
	if v == nil {
		if d := volumePool(ctx, c, s); d.HasErrors() {
			return volApply{Diagnostics: d}
		}
		post := incusapi.StorageVolumesPost{Name: s.Name, ContentType: s.ContentType, StorageVolumePut: incusapi.StorageVolumePut{Config: maps.Clone(s.want)}}
		post.Config[KeyCreatedBy] = c.Addr.String()
		if err := c.Settings.c.CreateStorageVolume(ctx, s.Pool, post); err != nil {
			return volApply{Diagnostics: apiErr(c, "Cannot Create Volume", err)}
		}
		logf(c, "volume %s created in pool %s (%s)", s.Name, s.Pool, s.ContentType)
		return volApply{Outputs: out, Revert: deleteVolume(s)}
	}
	if d := sameContent(c, s, v); d != nil {
		return volApply{Diagnostics: d}
	}
	ch := volumeChanges(s, v.Config)
	ours := v.Config[KeyCreatedBy] == c.Addr.String()
	if len(ch) == 0 {
		logf(c, "volume %s already has the settings the step manages", s.Name)
		if ours {
			return volApply{Outputs: out, Revert: deleteVolume(s)}
		}
		return volApply{Outputs: out, Revert: &sdk.RevertData[volumeRevert]{Description: fmt.Sprintf("nothing to undo: volume %s already had these settings", s.Name), Data: volumeRevert{Op: "none"}}}
	}
	put := v.StorageVolumePut
	put.Config = maps.Clone(v.Config)
	if put.Config == nil {
		put.Config = map[string]string{}
	}
	inv := volumeRevert{Op: "restore", Pool: s.Pool, Name: s.Name, Config: map[string]*string{}}
	for k, want := range s.want {
		old, had := v.Config[k]
		switch {
		case had && old == want:
			continue
		case !had:
			inv.Config[k] = nil
		case s.sens[k]:
			inv.NotKept = append(inv.NotKept, k)
		default:
			inv.Config[k] = &old
		}
		put.Config[k] = want
	}
	sort.Strings(inv.NotKept)
	if err := c.Settings.c.UpdateStorageVolume(ctx, s.Pool, s.Name, put, etag); err != nil {
		return volApply{Diagnostics: apiErr(c, "Cannot Update Volume", err)}
	}
	for _, x := range ch {
		logf(c, "volume %s: %c %s", s.Name, x.sign, x.text)
	}
	if ours {
		return volApply{Outputs: out, Revert: deleteVolume(s)}
	}
	return volApply{Outputs: out, Revert: &sdk.RevertData[volumeRevert]{Description: fmt.Sprintf("restore the previous config of volume %s", s.Name), Data: inv}}
}

func revertVolume(ctx context.Context, c *call, a volumeSpec, u sdk.Applied[volumeRevert]) phases.Diagnostics {
	inv := u.Data
	s := volumeSpec{Pool: pick(inv.Pool, orDefault(a.Pool, "default")), Name: pick(inv.Name, orDefault(a.Name, c.Addr.Name))}
	if inv.Op == "none" {
		return nil
	}
	v, etag, err := getVolume(ctx, c, s)
	if err != nil {
		return apiErr(c, "Cannot Read Volume", err)
	}
	switch {
	case v == nil && inv.Op == "delete":
		logf(c, "volume %s is already gone", s.Name)
		return nil
	case v == nil:
		return errorf("Unknown Volume", "%s: pool %q has no volume %q; its previous config cannot be restored.", c.Addr, s.Pool, s.Name)
	case inv.Op == "delete":
		if err := c.Settings.c.DeleteStorageVolume(ctx, s.Pool, s.Name); err != nil && !incusapi.IsNotFound(err) {
			return apiErr(c, "Cannot Delete Volume", err)
		}
		logf(c, "volume %s deleted from pool %s", s.Name, s.Pool)
		return nil
	case inv.Op != "restore":
		return errorf("Invalid Revert", "The revert data of %s has an unknown operation %q.", c.Addr, inv.Op)
	}
	put := v.StorageVolumePut
	put.Config = maps.Clone(v.Config)
	if put.Config == nil {
		put.Config = map[string]string{}
	}
	for k, old := range inv.Config {
		if old == nil {
			delete(put.Config, k)
		} else {
			put.Config[k] = *old
		}
	}
	if err := c.Settings.c.UpdateStorageVolume(ctx, s.Pool, s.Name, put, etag); err != nil {
		return apiErr(c, "Cannot Restore Volume", err)
	}
	logf(c, "volume %s: previous config restored", s.Name)
	if len(inv.NotKept) > 0 {
		return warning("Sensitive Settings Not Restored", "The previous values of %s on volume %s were sensitive, so the state did not keep them; they keep the runbook's values.", strings.Join(inv.NotKept, ", "), s.Name)
	}
	return nil
}
