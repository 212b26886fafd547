package incus

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// change is one line of a diff.
type change struct {
	sign byte // '+', '~', '-'
	text string
}

// instanceChanges compares the managed settings with the live instance.
// removed lists the keys and devices the step managed before and no
// longer lists.
func instanceChanges(s DesiredInstance, live *incusapi.Instance, removedConfig, removedDevices []string) []change {
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

func createDiff(s DesiredInstance) string {
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
func waitNote(s DesiredInstance) string {
	if s.WaitFor == "" {
		return ""
	}
	nic := "the first NIC"
	if s.NIC != "" {
		nic = "NIC " + s.NIC
	}
	return fmt.Sprintf("\n  then wait up to %s for an %s address of %s (wait_for)", orDefault(s.WaitTimeout, "2m"), strings.ToUpper(s.WaitFor[:2])+s.WaitFor[2:], nic)
}
