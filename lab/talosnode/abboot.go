package talosnode

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// A Talos disk has two boot partitions (A and B). An upgrade writes the
// installer's image to the one not running and makes it the default; the
// next boot runs it. When that boot fails (boot counting runs out: a
// kernel that panics, an initramfs that does not mount), the bootloader
// boots the other partition again: the node comes back healthy, running
// what it ran before the upgrade (Omni's issue #1552 is such a node).
//
// bootEntry is what one partition holds; persistedState keeps the
// running one (Version, Image), the other one (Previous) and an upgrade
// installed but not booted yet (Next).
type bootEntry struct {
	Partition string `json:"partition"` // "A" or "B"
	Version   string `json:"version"`
	Image     string `json:"image,omitempty"` // the installer image it was written from
}

// BootEntry is one boot partition as the node reports it (for tests).
type BootEntry struct {
	Partition  string
	Version    string
	Image      string
	Schematic  string   // the Image Factory schematic of Image ("" for a plain installer)
	Extensions []string // the official extensions it carries
}

// otherPartition is the partition an upgrade writes to.
func otherPartition(p string) string {
	if p == "B" {
		return "A"
	}

	return "B"
}

// runningLocked is the partition the node runs.
func (n *Node) runningLocked() bootEntry {
	image := n.state.Image
	if image == "" {
		if cfg, err := configloader.NewFromBytes(n.active); err == nil {
			image = installImage(cfg) // installed with the generated config
		}
	}

	return bootEntry{Partition: or(n.state.Partition, "A"), Version: n.state.Version, Image: image}
}

// writeOtherPartitionLocked is the installer's last act: the image is on
// the partition not running, which the next boot runs.
func (n *Node) writeOtherPartitionLocked(version, image string) {
	next := bootEntry{Partition: otherPartition(n.runningLocked().Partition), Version: version, Image: image}
	n.state.Next = &next
	n.saveStateLocked() //nolint:errcheck
}

// switchPartitionLocked runs at boot after an upgrade: the new partition
// boots, or (FallBackAtNextUpgrade) fails to and the bootloader boots the
// running one again.
func (n *Node) switchPartitionLocked() {
	next := n.state.Next
	if next == nil {
		return
	}

	n.state.Next = nil
	cur := n.runningLocked()

	if n.fallBack {
		n.fallBack = false
		n.logfLocked(facilityKern, "err", "Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)")
		n.logfLocked(facilityUser, "error", "[talos] boot entry %s (Talos %s) failed to boot: the bootloader's boot counting is exhausted, booting entry %s (Talos %s) again", next.Partition, next.Version, cur.Partition, cur.Version)
		n.saveStateLocked() //nolint:errcheck

		return
	}

	n.state.Previous = &cur
	n.state.Partition, n.state.Version, n.state.Image = next.Partition, next.Version, next.Image
	n.logfLocked(facilityUser, "warning", "[talos] booted entry %s: Talos %s (was %s on entry %s)", next.Partition, next.Version, cur.Version, cur.Partition)
	n.saveStateLocked() //nolint:errcheck
}

// FallBackAtNextUpgrade makes the next boot of a newly installed
// partition fail, so that the bootloader boots the other (running)
// partition again: the upgrade does not take, and nothing says so but
// the version, schematic and extensions the node reports after it.
func (n *Node) FallBackAtNextUpgrade() {
	n.mu.Lock()
	defer n.mu.Unlock()

	n.fallBack = true
}

// Boot returns the partition the node runs and the other one (Partition
// "" when nothing was ever written to it).
func (n *Node) Boot() (running, other BootEntry) {
	n.mu.Lock()
	defer n.mu.Unlock()

	running = n.entryLocked(n.runningLocked())
	if p := n.state.Previous; p != nil {
		other = n.entryLocked(*p)
	}

	return running, other
}

func (n *Node) entryLocked(e bootEntry) BootEntry {
	return BootEntry{Partition: e.Partition, Version: e.Version, Image: e.Image, Schematic: SchematicOf(e.Image), Extensions: n.extensionsOf(e.Image)}
}

func (n *Node) extensionsOf(image string) []string {
	if n.opts.Extensions == nil || image == "" {
		return nil
	}

	return n.opts.Extensions(image)
}

// SchematicOf is the Image Factory schematic ID an installer image
// carries: the path element after ".../<platform>-installer/" or
// ".../installer/" of a factory's reference; "" for another image (the
// plain ghcr.io/siderolabs/installer has no schematic).
func SchematicOf(image string) string {
	ref := image
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}

	parts := strings.Split(ref, "/")
	for i := 1; i+1 < len(parts); i++ {
		if parts[i] == "installer" || strings.HasSuffix(parts[i], "-installer") {
			id, _, _ := strings.Cut(parts[i+1], ":")

			return id
		}
	}

	return ""
}

// reportRunningImageLocked makes the resources say what the running
// partition holds, as an installed node reports it (talosctl get version,
// talosctl get extensions): its Talos version, one ExtensionStatus per
// official extension of its image, then the "schematic" extension whose
// version is the schematic ID, as Image Factory images carry it.
func (n *Node) reportRunningImageLocked() {
	if n.resources == nil || n.maintenance {
		return
	}

	e := n.entryLocked(n.runningLocked())
	if err := setImageResources(n.resources, e.Version, e.Schematic, e.Extensions); err != nil {
		n.logfLocked(facilityUser, "error", "[talos] lab: image resources: %v", err)
	}
}

// setImageResources replaces the Version and ExtensionStatus resources
// (defining their types first when needed).
func setImageResources(st state.State, version, schematic string, exts []string) error {
	ctx := context.Background()

	for _, def := range []meta.ResourceDefinitionSpec{runtime.VersionExtension{}.ResourceDefinition(), runtime.ExtensionStatusExtension{}.ResourceDefinition()} {
		rd, err := meta.NewResourceDefinition(def)
		if err != nil {
			return err
		}

		if err = st.Create(ctx, rd); err != nil && !state.IsConflictError(err) {
			return err
		}
	}

	old, err := safe.StateListAll[*runtime.ExtensionStatus](ctx, st)
	if err != nil {
		return err
	}

	for r := range old.All() {
		if err = st.Destroy(ctx, r.Metadata(), state.WithDestroyOwner("runtime.ExtensionStatusController")); err != nil {
			return err
		}
	}

	if err = st.Destroy(ctx, runtime.NewVersion().Metadata(), state.WithDestroyOwner("runtime.VersionController")); err != nil && !state.IsNotFoundError(err) {
		return err
	}

	return createImageResources(ctx, st, version, schematic, exts)
}

// createImageResources creates the Version resource and the
// ExtensionStatus ones.
func createImageResources(ctx context.Context, st state.State, version, schematic string, exts []string) error {
	v := runtime.NewVersion()
	v.TypedSpec().Name, v.TypedSpec().Version = "Talos", version

	if err := st.Create(ctx, v, state.WithCreateOwner("runtime.VersionController")); err != nil {
		return err
	}

	layers := append([]string(nil), exts...)
	if schematic != "" {
		layers = append(layers, "schematic")
	}

	if slices.ContainsFunc(exts, carriesModules) {
		layers = append(layers, modulesDep)
	}

	for i, name := range layers {
		r := runtime.NewExtensionStatus(runtime.NamespaceName, resource.ID(fmt.Sprint(i)))
		spec := r.TypedSpec()
		spec.Image = fmt.Sprintf("%03d.%s.sqsh", i, strings.ReplaceAll(name, "/", "-"))
		spec.Metadata.Name = strings.TrimPrefix(name, "siderolabs/")
		spec.Metadata.Version = version
		spec.Metadata.Author = "Sidero Labs"

		switch name {
		case "schematic":
			spec.Metadata.Version, spec.Metadata.Description = schematic, "Image Factory schematic"
		case modulesDep:
			spec.Metadata.Version, spec.Metadata.Author, spec.Metadata.Description = kernelVersion, "Talos Machinery", "Combined modules.dep for all extensions"
		}

		if err := st.Create(ctx, r, state.WithCreateOwner("runtime.ExtensionStatusController")); err != nil {
			return err
		}
	}

	return nil
}

// modulesDep is the extension the installer makes when extensions bring
// kernel modules: their combined modules.dep (Talos'
// internal/pkg/extensions/kernel_modules.go). A node reports it beside
// the schematic's extensions.
const (
	modulesDep    = "modules.dep"
	kernelVersion = "6.18.0-talos"
)

// carriesModules says whether an official extension brings kernel
// modules (the drivers; firmware and tools bring none).
func carriesModules(ext string) bool {
	return slices.Contains([]string{"siderolabs/i915", "siderolabs/amdgpu", "siderolabs/nvidia-open-gpu-kernel-modules-lts", "siderolabs/zfs", "siderolabs/drbd", "siderolabs/gasket-driver"}, ext)
}

func or(s, def string) string {
	if s == "" {
		return def
	}

	return s
}
