package talosnode

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
)

// GPUPCI is the PCI address of the VM's iGPU, as on the brief's host.
const GPUPCI = "0000:00:02.0"

// baseModules are /proc/modules of a Talos VM without a GPU driver.
const baseModules = `virtiofs 32768 1 - Live 0x0000000000000000
fuse 176128 3 virtiofs, Live 0x0000000000000000
virtio_net 73728 0 - Live 0x0000000000000000
virtio_scsi 28672 2 - Live 0x0000000000000000
`

// i915Module is its line when the i915 extension's driver loaded.
const i915Module = "i915 4374528 0 - Live 0x0000000000000000\n"

// hardwareLocked sets up, for the boot of the running config, what the
// VM's devices make visible: virtiofs mounts and the GPU driver.
func (n *Node) hardwareLocked() {
	n.mounts = nil
	n.mountsLocked()

	cfg, err := configloader.NewFromBytes(n.active)
	if err != nil || n.maintenance {
		return
	}

	image := n.state.Image // the last install or upgrade
	if image == "" {
		image = installImage(cfg)
	}

	var ext []string
	if n.opts.Extensions != nil {
		ext = n.opts.Extensions(image)
	}

	n.modulesLocked(ext)
}

// modulesLocked writes /proc/modules (and the driver's dmesg lines) of a
// boot whose image carries the extensions ext.
func (n *Node) modulesLocked(ext []string) {
	modules := baseModules
	if n.opts.GPU && slices.Contains(ext, "siderolabs/i915") {
		modules = i915Module + modules
		for _, l := range []string{
			"i915 " + GPUPCI + ": [drm] VT-d active for gfx access",
			"i915 " + GPUPCI + ": [drm] Using Transparent Hugepages",
			"i915 " + GPUPCI + ": [drm] Finished loading DMC firmware i915/adlp_dmc.bin (v2.20)",
			"[drm] Initialized i915 1.6.0 for " + GPUPCI + " on minor 0",
		} {
			n.logfLocked(facilityKern, "info", "%s", l)
		}
	}

	p := filepath.Join(n.rootDir, "proc/modules")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
		os.WriteFile(p, []byte(modules), 0o444) //nolint:errcheck
	}

	n.renderNodeLocked(strings.HasPrefix(modules, "i915 "))
}

// The DRM device nodes the i915 driver makes: card0 and the render node
// that VA-API opens (Jellyfin's and Frigate's hardware decoding), with
// their sysfs entries. This machine has no DRM device, so the nodes are
// character devices with the null device's numbers (1:3): they exist,
// `test -c` passes and they open read-write, as a pod given /dev/dri by
// hostPath needs; their sysfs "dev" files say DRM's real numbers.
var drmNodes = map[string]string{"card0": "226:0", "renderD128": "226:128"}

// nullDevice is makedev(1, 3) (small numbers: major<<8 | minor).
const nullDevice = 1<<8 | 3

// renderNodeLocked makes /dev/dri and /sys/class/drm when the driver
// loaded, and removes them otherwise.
func (n *Node) renderNodeLocked(loaded bool) {
	dri, sys := filepath.Join(n.rootDir, "dev/dri"), filepath.Join(n.rootDir, "sys/class/drm")

	os.RemoveAll(dri) //nolint:errcheck
	os.RemoveAll(sys) //nolint:errcheck

	if !loaded {
		return
	}

	for name, numbers := range drmNodes {
		if err := os.MkdirAll(filepath.Join(sys, name), 0o755); err != nil {
			n.logfLocked(facilityKern, "err", "[drm] %s: %v", name, err)

			continue
		}

		os.WriteFile(filepath.Join(sys, name, "dev"), []byte(numbers+"\n"), 0o444) //nolint:errcheck

		if err := os.MkdirAll(dri, 0o755); err != nil {
			continue
		}

		if err := syscall.Mknod(filepath.Join(dri, name), syscall.S_IFCHR|0o666, nullDevice); err != nil {
			// not root: a plain file, which opens but is no device
			n.logfLocked(facilityKern, "err", "[drm] lab: /dev/dri/%s as a plain file (mknod: %v)", name, err)
			os.WriteFile(filepath.Join(dri, name), nil, 0o666) //nolint:errcheck
		}
	}
}

// mountsLocked mounts the virtiofs volumes of the running config, as
// machined's volume controllers do at boot and when the config changes
// (volume documents apply without a reboot); a volume no longer in the
// config is unmounted.
func (n *Node) mountsLocked() {
	mounts := map[string]string{}

	cfg, err := configloader.NewFromBytes(n.active)
	if err == nil && !n.maintenance {
		for _, v := range cfg.ExternalVolumeConfigs() {
			spec, ok := v.Mount().Virtiofs().Get()
			if !ok {
				continue
			}

			mountPoint := "/var/mnt/" + v.Name()
			dir, shared := n.opts.Shares[spec.Source()]

			switch {
			case shared && n.mounts[mountPoint] != dir:
				n.logfLocked(facilityUser, "info", "[talos] volume %s mounted at %s (virtiofs %s)", v.Name(), mountPoint, spec.Source())
			case !shared:
				n.logfLocked(facilityKern, "err", "virtio-fs: tag <%s> not found", spec.Source())
				n.logfLocked(facilityUser, "error", "[talos] volume %s: mount %s failed: no virtiofs device with tag %q", v.Name(), mountPoint, spec.Source())
			}

			if shared {
				mounts[mountPoint] = dir
			}
		}
	}

	n.mounts = mounts
}

// resolveMount maps a node path to the host directory of the mount it is
// under and the path inside it; ok is false for paths of the root.
func (n *Node) resolveMount(p string) (dir, rel string, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()

	points := make([]string, 0, len(n.mounts))
	for m := range n.mounts {
		points = append(points, m)
	}

	sort.Sort(sort.Reverse(sort.StringSlice(points))) // longest first

	for _, m := range points {
		if p == m || strings.HasPrefix(p, m+"/") {
			rel = strings.TrimPrefix(strings.TrimPrefix(p, m), "/")
			if rel == "" {
				rel = "."
			}

			return n.mounts[m], path.Clean(rel), true
		}
	}

	return "", "", false
}

// startControlPlaneLocked starts the node's Kubernetes on a bootstrapped
// node with a control plane.
func (n *Node) startControlPlaneLocked() {
	if n.opts.ControlPlane == nil || !n.state.Bootstrapped || n.maintenance {
		return
	}

	cfg, err := configloader.NewFromBytes(n.active)
	if err != nil {
		return
	}

	n.opts.ControlPlane.Start(cfg, filepath.Join(n.rootDir, "var/lib/etcd"))
}

// etcdHealthy is etcd's health as ServiceList reports it.
func (n *Node) etcdHealthy(bootstrapped bool, since time.Time) bool {
	if !bootstrapped {
		return false
	}

	if n.opts.ControlPlane != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()

		return n.opts.ControlPlane.EtcdHealthy(ctx)
	}

	return !time.Now().Before(since)
}

// HostPath is where the absolute node path p lives on the host: under a
// virtiofs mount, in the shared host directory; else under the node's
// root directory (Root). The path need not exist; a path with ".." or
// whose existing part goes through a symlink pointing out of that
// directory is refused, so that what a pod mounts stays the node's.
func (n *Node) HostPath(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("node path %q is not absolute", p)
	}

	if slices.Contains(strings.Split(p, "/"), "..") {
		return "", fmt.Errorf("node path %q: \"..\" is not allowed", p)
	}

	p = path.Clean(p)
	base, rel := n.rootDir, strings.TrimPrefix(p, "/")

	if dir, in, ok := n.resolveMount(p); ok {
		base, rel = dir, in
	}

	realBase, err := filepath.EvalSymlinks(base)
	if err != nil {
		return "", fmt.Errorf("node path %s: %w", p, err)
	}

	// the longest part that exists, its symlinks resolved, then the rest
	existing, rest := filepath.Join(realBase, rel), ""
	for existing != realBase {
		if _, err := os.Lstat(existing); err == nil {
			break
		}

		rest = filepath.Join(filepath.Base(existing), rest)
		existing = filepath.Dir(existing)
	}

	resolved, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return "", fmt.Errorf("node path %s: %w", p, err)
	}

	if r, err := filepath.Rel(realBase, resolved); err != nil || r == ".." || strings.HasPrefix(r, "../") {
		return "", fmt.Errorf("node path %s: a symlink leads out of the node's filesystem (to %s)", p, resolved)
	}

	return filepath.Join(resolved, rest), nil
}
