package incushost

import (
	"maps"
	"net/http"
	"slices"

	"github.com/homelab-migrate/migrate/lab/sandbox"
)

// diskChange is one disk device whose mount in a running container a
// change of its devices moves: old unmounted, then new mounted (either
// nil).
type diskChange struct {
	device   string
	old, new *sandbox.Bind
}

// diskChanges lists the mounts that differ between two sets of (expanded)
// devices, in device name order; the caller holds s.mu.
func (s *Server) diskChanges(before, after map[string]map[string]string) []diskChange {
	var out []diskChange
	both := maps.Clone(before)
	maps.Copy(both, after)
	for _, name := range slices.Sorted(maps.Keys(both)) {
		ob, hadOld := s.bindOf(before[name])
		nb, hasNew := s.bindOf(after[name])
		if hadOld == hasNew && (!hadOld || ob == nb) {
			continue
		}
		c := diskChange{device: name}
		if hadOld {
			c.old = &ob
		}
		if hasNew {
			c.new = &nb
		}
		out = append(out, c)
	}
	return out
}

// hotplugDisks makes a running instance's mounts follow a change of its
// devices at once, as the daemon hotplugs disks into a container: each
// mount removed or changed is unmounted, each new one mounted. A failure
// undoes the ones done and is the change's error. A VM booted through
// BootVM cannot be told (its Guest has no hotplug): such a change is
// refused, saying so. The caller holds s.mu.
func (s *Server) hotplugDisks(in *instance, before, after map[string]map[string]string) error {
	if !in.Running {
		return nil
	}
	changes := s.diskChanges(before, after)
	if len(changes) == 0 {
		return nil
	}
	if in.init == nil {
		return errf(http.StatusBadRequest, "The lab cannot hot-plug shared disk %q into VM %q while its guest runs (a guest booted through BootVM is told its shared directories at boot only): stop the instance, change its devices, then start it", changes[0].device, in.Name)
	}
	for i, c := range changes {
		err := in.init.hotplug(pathOf(c.old), c.new)
		if err == nil {
			continue
		}
		for j := i - 1; j >= 0; j-- { // back as it was
			_ = in.init.hotplug(pathOf(changes[j].new), changes[j].old)
		}
		if c.new == nil {
			return errf(http.StatusBadRequest, "Failed to stop device %q: %v", c.device, err)
		}
		return errf(http.StatusBadRequest, "Failed to start device %q: %v", c.device, err)
	}
	s.logf("incus lab: %s: %d disk(s) hot-plugged", in.Name, len(changes))
	return nil
}

func pathOf(b *sandbox.Bind) string {
	if b == nil {
		return ""
	}
	return b.Path
}
