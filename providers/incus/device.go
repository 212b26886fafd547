package incus

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// An incus_device step attaches one device to an instance that exists
// (a volume to a running container, a data disk to a VM) or, with
// ensure = "absent", detaches one (the install ISO once the install is
// done), without owning the rest of the instance as incus_instance does.
// It edits the instance's own devices with the ETag read by the plan, so
// a concurrent change is refused rather than overwritten, and keeps the
// device's previous options (its own, or none when a profile gave it) so
// that rollback puts the instance back as it was.

// Device is the name of the incus_device step type.
const Device = "incus_device"

// deviceAttrs are the attributes of an incus_device step.
type deviceAttrs struct {
	Instance string            `cty:"instance" required:"true" doc:"The instance, which must exist (a step that creates it comes first: refer to its outputs)."`
	Name     string            `cty:"name" required:"true" doc:"The device's name on the instance, as in incus_instance's devices."`
	Device   map[string]string `cty:"device" doc:"The device: its type and options, as in incus_instance's devices ({type = \"disk\", pool = \"data\", source = \"photos\", path = \"/mnt/photos\"}). Required with ensure = \"present\"; the pool, volume and network it names must exist."`
	Unset    []string          `cty:"unset_config" doc:"With ensure = \"absent\": instance config keys removed in the same update as the device (cloud-init.user-data with its cloud-init:config drive, once the node installed from it: the first machine config holds the cluster's keys and must not stay in the Incus host's instance config). Their values are never shown nor kept: rollback puts the device back, not them. An incus_instance step that declared them hands them over instead of planning them back."`
	Ensure   string            `cty:"ensure" doc:"\"present\" (default): the instance has this device with exactly these options (a device of that name from a profile, or with other options, is changed, its previous options kept for rollback); \"absent\": the instance has no device of that name (one from a profile is masked with type = \"none\")."`
}

// deviceOut is the outputs of an incus_device step.
type deviceOut struct {
	Instance string `cty:"instance"`
	Name     string `cty:"name"`
	Path     string `cty:"path"` // a disk's path in the instance; "" otherwise
}

// devicePrivate is what the plan read: the instance's ETag and identity.
type devicePrivate struct {
	ETag string `json:"etag,omitempty"`
	UUID string `json:"uuid,omitempty"`
}

// deviceRevert is how to undo an incus_device step: put the instance's
// own device of that name back to Previous (nil: it had none, so the
// device goes, and one a profile gives shows again).
type deviceRevert struct {
	Op       string            `json:"op"` // "restore" or "none"
	Instance string            `json:"instance,omitempty"`
	UUID     string            `json:"uuid,omitempty"` // the instance changed, by its volatile.uuid
	Name     string            `json:"name,omitempty"`
	Previous map[string]string `json:"previous,omitempty"`
}

type (
	devPrior = *sdk.Prior[devicePrivate, deviceRevert]
	devApply = sdk.Apply[devicePrivate, deviceRevert]
)

var deviceStep = &sdk.StepType[*conn, deviceAttrs, devicePrivate, deviceRevert]{
	Name:        Device,
	Description: "Attaches a device (a disk, a nic...) to an existing instance, hot-plugged when it runs, or detaches one (ensure = \"absent\"); rollback puts the instance's device back as it was.",
	Rollback:    "Removes the device it added, or puts back the options of the device it changed or removed.",
	Outputs:     deviceOut{},
	Validate:    validateDevice,
	Read:        readDevice,
	Plan:        planDevice,
	Apply:       applyDevice,
	Revert:      revertDevice,
}

func validateDevice(c *call, a *deviceAttrs) phases.Diagnostics {
	var diags phases.Diagnostics
	a.Ensure = orDefault(a.Ensure, "present")
	switch {
	case a.Ensure != "present" && a.Ensure != "absent":
		diags = append(diags, errorf("Invalid Attribute Value", "The \"ensure\" attribute of %s must be \"present\" or \"absent\", not %q.", c.Addr, a.Ensure)...)
	case a.Ensure == "present" && a.Device["type"] == "":
		diags = append(diags, errorf("Missing Device Type", "%s attaches device %q but its device map has no type: set device = {type = \"disk\", ...} (disk, nic, gpu, proxy... as in incus_instance's devices).", c.Addr, a.Name)...)
	}
	for _, k := range a.Unset {
		switch {
		case a.Ensure != "absent":
			diags = append(diags, errorf("Invalid Attribute Value", "%s: unset_config goes with ensure = \"absent\" (a device detached and the keys that fed it, such as cloud-init.user-data with its cloud-init:config drive).", c.Addr)...)
		case k == "" || strings.HasPrefix(k, "volatile."):
			diags = append(diags, errorf("Invalid Attribute Value", "%s: unset_config cannot name %q: a config key the user sets (volatile keys are the daemon's).", c.Addr, k)...)
		default:
			continue
		}
		break
	}
	if a.Name == "" || strings.ContainsAny(a.Name, "/ ") {
		diags = append(diags, errorf("Invalid Attribute Value", "The \"name\" attribute of %s must be a device name (no \"/\" or space), not %q.", c.Addr, a.Name)...)
	}
	return diags
}

// deviceView is the instance and what it has of the device.
type deviceView struct {
	inst    *incusapi.Instance
	etag    string
	own     map[string]string // the instance's own device; nil when none
	has     map[string]string // the device in effect (expanded); nil when none or type none
	profile string            // the last of its profiles with a device of that name; "" when none
	keys    []string          // the keys of unset_config the instance has, sorted
}

// from names where the device in effect comes from: "" for the
// instance's own, else its profile.
func (v *deviceView) from() string {
	if v.own == nil && v.has != nil {
		return v.profile
	}
	return ""
}

// viewDevice reads the instance (and its profiles); a nil view without
// error when it does not exist.
func viewDevice(ctx context.Context, c *call, a deviceAttrs) (*deviceView, error) {
	inst, etag, err := getInstance(ctx, c, a.Instance)
	if err != nil || inst == nil {
		return nil, err
	}
	v := &deviceView{inst: inst, etag: etag, own: inst.Devices[a.Name], has: inst.ExpandedDevices[a.Name]}
	for _, k := range a.Unset {
		if _, ok := inst.Config[k]; ok && !slices.Contains(v.keys, k) {
			v.keys = append(v.keys, k)
		}
	}
	slices.Sort(v.keys)
	if v.has == nil && inst.ExpandedDevices == nil { // a server that does not expand
		v.has = v.own
	}
	if v.has["type"] == "none" {
		v.has = nil
	}
	for _, p := range slices.Backward(inst.Profiles) {
		prof, err := c.Settings.c.Profile(ctx, p)
		if err != nil {
			return nil, err
		}
		if prof.Devices[a.Name] != nil {
			v.profile = "profile " + p
			break
		}
	}
	return v, nil
}

// done says whether the instance is as the step wants.
func (v *deviceView) done(a deviceAttrs) bool {
	if a.Ensure == "absent" {
		return v.has == nil && len(v.keys) == 0
	}
	return maps.Equal(v.has, a.Device)
}

// wantOwn is the instance's own device after the step: nil to delete it.
func (v *deviceView) wantOwn(a deviceAttrs) map[string]string {
	switch {
	case a.Ensure == "present":
		return maps.Clone(a.Device)
	case v.profile != "":
		return map[string]string{"type": "none"} // masks the profile's, as incus does
	}
	return nil
}

func deviceOutputs(a deviceAttrs, v *deviceView) deviceOut {
	out := deviceOut{Instance: a.Instance, Name: a.Name}
	d := a.Device
	if a.Ensure == "absent" && v != nil {
		d = v.has
		if d == nil {
			d = v.own
		}
	}
	if d["type"] == "disk" {
		out.Path = d["path"]
	}
	return out
}

func readDevice(ctx context.Context, c *call, a deviceAttrs, prior devPrior) sdk.Read[deviceRevert] {
	v, err := viewDevice(ctx, c, a)
	if err != nil {
		return sdk.Read[deviceRevert]{Diagnostics: apiErr(c, "Cannot Read Instance", err)}
	}
	if v == nil {
		return sdk.Read[deviceRevert]{Observation: providers.Absent, Detail: fmt.Sprintf("instance %q does not exist", a.Instance)}
	}
	r := sdk.Read[deviceRevert]{Identity: identityOf(v.inst), Outputs: deviceOutputs(a, v)}
	switch {
	case v.done(a):
		r.Observation = providers.Present
	case prior == nil:
		r.Observation, r.Detail = providers.Absent, fmt.Sprintf("instance %s: %s", a.Instance, deviceState(a, v))
	default:
		r.Observation, r.Detail = providers.Drifted, fmt.Sprintf("instance %s changed since the step applied: %s", a.Instance, deviceState(a, v))
	}
	return r
}

// deviceState says how the device differs from the step.
func deviceState(a deviceAttrs, v *deviceView) string {
	switch {
	case a.Ensure == "absent" && v.has == nil:
		return fmt.Sprintf("it has config %s again", strings.Join(v.keys, ", "))
	case a.Ensure == "absent":
		return fmt.Sprintf("it has device %s again (%s)", a.Name, describeDevice(a.Name, v.has))
	case v.has == nil:
		return fmt.Sprintf("device %s is not there (removed?)", a.Name)
	}
	return renderChanges(fmt.Sprintf("device %s differs from the step:", a.Name), optionChanges(v.has, a.Device))
}
