package incus

import (
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// retainLayout is the format of retain_until.
const retainLayout = "2006-01-02"

var instanceNameRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9-]{0,62}$`)

// DesiredInstance is an incus_instance step as read, plan and apply use
// it: its attributes with the defaults filled in and cpu and memory merged
// into Config (a copy), and what normalize derives from them.
type DesiredInstance struct {
	InstanceSpec

	// ProfilesSet: profiles was given (an empty list clears them).
	ProfilesSet bool
	// Sensitive config keys and devices (any of whose keys is sensitive).
	SensitiveConfig  map[string]bool
	SensitiveDevices map[string]bool
}

// desired is the step's DesiredInstance; Validate has reported what is
// wrong with it.
func desired(c *call, a InstanceSpec) DesiredInstance {
	s, _ := normalize(c.Addr, a, c.Sensitive)
	return s
}

// normalize fills the defaults of a decoded incus_instance step, merges
// cpu and memory into its config, and checks it; sensitive says whether
// an attribute (or a key inside it) is sensitive. It leaves a as it is.
func normalize(addr phases.Address, a InstanceSpec, sensitive func(string, ...any) bool) (DesiredInstance, phases.Diagnostics) {
	s, diags := derive(addr, a, sensitive)
	return s, append(diags, checkInstance(addr.String(), s)...)
}

// derive fills the defaults and merges cpu and memory into the config;
// its diagnostics are the conflicts between them.
func derive(addr phases.Address, a InstanceSpec, sensitive func(string, ...any) bool) (DesiredInstance, phases.Diagnostics) {
	var diags phases.Diagnostics
	what := addr.String()
	s := DesiredInstance{InstanceSpec: a, ProfilesSet: a.Profiles != nil}
	s.Name = orDefault(s.Name, addr.Name)
	s.Ensure = orDefault(s.Ensure, "present")
	s.Type = orDefault(s.Type, "virtual-machine")
	s.SensitiveConfig, s.SensitiveDevices = map[string]bool{}, map[string]bool{}
	s.Config = maps.Clone(a.Config)
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
			diags = append(diags, errorf("Invalid Attribute Value", "The %q attribute of %s must be a whole number above zero.", "cpu", what)...)
		}
		if _, dup := s.Config["limits.cpu"]; dup {
			diags = append(diags, errorf("Conflicting Attributes", "%s sets both cpu and config[\"limits.cpu\"]; keep one.", what)...)
		}
		s.Config["limits.cpu"] = strconv.FormatFloat(*s.CPU, 'f', 0, 64)
		if sensitive("cpu") {
			s.SensitiveConfig["limits.cpu"] = true
		}
	}
	if s.Memory != "" {
		if _, dup := s.Config["limits.memory"]; dup {
			diags = append(diags, errorf("Conflicting Attributes", "%s sets both memory and config[\"limits.memory\"]; keep one.", what)...)
		}
		s.Config["limits.memory"] = s.Memory
		if sensitive("memory") {
			s.SensitiveConfig["limits.memory"] = true
		}
	}
	if s.Devices == nil {
		s.Devices = map[string]map[string]string{}
	}
	for name := range s.Devices {
		if sensitive("devices", name) {
			s.SensitiveDevices[name] = true
		}
	}
	return s, diags
}

// checkInstance checks a derived incus_instance step; what is its address.
func checkInstance(what string, s DesiredInstance) phases.Diagnostics {
	var diags phases.Diagnostics
	errorf := func(summary, format string, args ...any) {
		diags = append(diags, phases.Errorf(summary, format, args...)...)
	}
	for key := range s.Config {
		if strings.HasPrefix(key, "user.migrate.") {
			errorf("Reserved Config Key", "%s sets %q: the user.migrate.* keys are migrate's own marks (kept for rollback, created by); use another user.* key.", what, key)
		}
	}
	for name, dev := range s.Devices {
		if dev["type"] == "" {
			errorf("Invalid Device", "Device %q of %s has no type: every device needs one, such as type = \"disk\" or type = \"gpu\".", name, what)
		}
		// The daemon's rule, said at plan time: "Only the root disk may
		// have a size quota".
		if dev["type"] == "disk" && dev["size"] != "" && (dev["path"] != "/" || dev["source"] != "") {
			errorf("Invalid Device", "Device %q of %s sets size = %q, but only the root disk (path = \"/\", no source) may have a size: Incus refuses it (\"Only the root disk may have a size quota\"). Size the volume itself (incus_volume's size) and drop size here.", name, what, dev["size"])
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
func CreateRequest(s DesiredInstance, createdBy string) incusapi.InstancesPost {
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
