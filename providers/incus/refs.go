package incus

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// hostRef is a storage pool, custom storage volume or network that a step
// names and that must exist on the host before the step changes anything:
// the daemon would refuse the request anyway, but only after the plan
// said it would work, and with a message that does not say what is there.
type hostRef struct {
	kind   string // "pool", "volume" or "network"
	pool   string // the volume's pool
	name   string
	device string // the device naming it; "" for the step's own attribute
	attr   string // the attribute (or device key) naming it
}

// deviceRefs lists what the devices named in only refer to on the host, in
// device name order: a disk's pool, and its custom volume (source, when it
// is not a host path); a nic's network, or the parent of a bridged or
// macvlan NIC.
func deviceRefs(devices map[string]map[string]string, only func(string) bool) []hostRef {
	var out []hostRef
	for _, name := range slices.Sorted(maps.Keys(devices)) {
		if only != nil && !only(name) {
			continue
		}
		dev := devices[name]
		switch dev["type"] {
		case "disk":
			pool := dev["pool"]
			if pool == "" || strings.Contains(pool, phases.UnknownText) {
				continue
			}
			out = append(out, hostRef{kind: "pool", name: pool, device: name, attr: "pool"})
			if src := dev["source"]; isVolumeName(src) {
				out = append(out, hostRef{kind: "volume", pool: pool, name: src, device: name, attr: "source"})
			}
		case "nic":
			switch {
			case dev["network"] != "":
				out = append(out, hostRef{kind: "network", name: dev["network"], device: name, attr: "network"})
			case (dev["nictype"] == "bridged" || dev["nictype"] == "macvlan") && dev["parent"] != "":
				out = append(out, hostRef{kind: "network", name: dev["parent"], device: name, attr: "parent"})
			}
		}
	}
	return slices.DeleteFunc(out, func(r hostRef) bool { return strings.Contains(r.name, phases.UnknownText) })
}

// isVolumeName: a disk's source names a custom volume of its pool unless
// it is a host path, a remote source (ceph:, cephfs:) or a volume of
// another type or a snapshot (a "/" in it), which are not checked.
func isVolumeName(src string) bool {
	return src != "" && !strings.ContainsAny(src, "/:")
}

// checkRefs fails with one diagnostic for each ref that does not exist on
// the host, naming the ones that do. It only reads.
func checkRefs(ctx context.Context, c *call, refs []hostRef) phases.Diagnostics {
	var diags phases.Diagnostics
	pools := map[string]bool{} // exists, by name
	seen := map[hostRef]bool{}
	l := &hostLists{c: c}
	for _, r := range refs {
		key := hostRef{kind: r.kind, pool: r.pool, name: r.name}
		if seen[key] {
			continue
		}
		seen[key] = true
		var err error
		switch r.kind {
		case "pool":
			_, err = c.Settings.c.StoragePool(ctx, r.name)
			pools[r.name] = err == nil
		case "volume":
			if ok, known := pools[r.pool]; known && !ok {
				continue // its pool is reported missing
			}
			_, _, err = c.Settings.c.StorageVolume(ctx, r.pool, r.name)
		case "network":
			_, err = c.Settings.c.Network(ctx, r.name)
		}
		switch {
		case err == nil:
		case incusapi.IsNotFound(err):
			diags = append(diags, l.missing(ctx, r)...)
		default:
			return apiErr(c, "Cannot Read "+kindTitle(r.kind), err)
		}
	}
	return diags
}

func kindTitle(kind string) string {
	switch kind {
	case "pool":
		return "Storage Pool"
	case "volume":
		return "Storage Volume"
	}
	return "Network"
}

// hostLists reads what the host has, once each, for the diagnostics.
type hostLists struct {
	c        *call
	pools    []string
	poolsErr error
	poolsOK  bool
	volumes  map[string][]string
	nets     []incusapi.Network
	netsErr  error
	netsOK   bool
}

// has says what the host has of the kind of r, as "the host has: a, b"
// (or why it cannot say), and returns the names.
func (l *hostLists) has(ctx context.Context, r hostRef) (string, []string) {
	var names []string
	var err error
	whose := "the host has"
	switch r.kind {
	case "pool":
		if !l.poolsOK {
			l.pools, l.poolsErr = l.c.Settings.c.StoragePools(ctx)
			l.poolsOK = true
		}
		names, err = l.pools, l.poolsErr
	case "volume":
		whose = fmt.Sprintf("pool %q has", r.pool)
		if l.volumes == nil {
			l.volumes = map[string][]string{}
		}
		if v, ok := l.volumes[r.pool]; ok {
			names = v
		} else {
			names, err = l.c.Settings.c.StorageVolumes(ctx, r.pool)
			if err == nil {
				l.volumes[r.pool] = names
			}
		}
	case "network":
		if !l.netsOK {
			l.nets, l.netsErr = l.c.Settings.c.Networks(ctx)
			l.netsOK = true
		}
		err = l.netsErr
		for _, n := range l.nets {
			// A nic's network is a managed one; a parent, any interface.
			if n.Managed || r.attr == "parent" {
				names = append(names, n.Name)
			}
		}
	}
	switch {
	case err != nil:
		return fmt.Sprintf("the host did not list them (%v)", strings.TrimSuffix(err.Error(), ".")), nil
	case len(names) == 0:
		return whose + " none", nil
	}
	return whose + ": " + strings.Join(names, ", "), names
}

// missing is the diagnostic of a ref the host does not have.
func (l *hostLists) missing(ctx context.Context, r hostRef) phases.Diagnostics {
	c := l.c
	by := fmt.Sprintf("device %s of %s (%s = %q)", r.device, c.Addr, r.attr, r.name)
	if r.device == "" {
		by = fmt.Sprintf("the %s attribute of %s", r.attr, c.Addr)
	}
	has, names := l.has(ctx, r)
	where := c.Settings.where
	switch r.kind {
	case "pool":
		return errorf("Unknown Storage Pool", "The storage pool %q named by %s does not exist on Incus at %s; %s. %s Nothing was changed.", r.name, by, where, has, poolFix(r.name, names))
	case "volume":
		return errorf("Unknown Storage Volume", "The custom storage volume %q of pool %q named by %s does not exist on Incus at %s%s; %s. If a step of the runbook creates it, refer to that step's outputs (pool = incus_volume.NAME.pool, source = incus_volume.NAME.name) so that this step waits for it; otherwise create the volume (incus storage volume create %s %s), or fix the name. Nothing was changed.", r.name, r.pool, by, where, projectNote(c), has, r.pool, r.name)
	}
	fix := "Set network to one of the managed networks listed, or create the network (incus network create)."
	if r.attr == "parent" {
		fix = "Set parent to one of the host's interfaces listed (a bridge for nictype = \"bridged\"), or create it."
	}
	return errorf("Unknown Network", "The network %q named by %s does not exist on Incus at %s%s; %s. %s Nothing was changed.", r.name, by, where, projectNote(c), has, fix)
}

// instanceRefs checks what the devices of s that an apply would send (all
// of them for a new instance; those added or changed for inst) refer to.
func instanceRefs(ctx context.Context, c *call, s DesiredInstance, inst *incusapi.Instance) phases.Diagnostics {
	only := func(string) bool { return true }
	if inst != nil {
		only = func(name string) bool { return !maps.Equal(inst.Devices[name], s.Devices[name]) }
	}
	return checkRefs(ctx, c, deviceRefs(s.Devices, only))
}

// volumePool checks, before a volume is created, that its pool exists.
func volumePool(ctx context.Context, c *call, s volumeSpec) phases.Diagnostics {
	return checkRefs(ctx, c, []hostRef{{kind: "pool", name: s.Pool, attr: "pool"}})
}

// poolFix says how to fix a missing pool, given the pools the host has.
func poolFix(missing string, has []string) string {
	switch {
	case missing == "default" && slices.Contains(has, "local"):
		return `Set pool = "local" (IncusOS calls its default pool "local"), or create the pool.`
	case len(has) == 0:
		return "Create the pool (incus storage create), or set pool to one the host has."
	}
	return "Set pool to one of those, or create the pool (incus storage create)."
}
