package talosnode

import (
	"context"
	"fmt"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// addBootImage creates what a node booted from an image reports of it in
// maintenance mode, readable with talosctl --insecure: the Version
// resource (talosctl get version: Talos and the version booted) and one
// ExtensionStatus per system extension of the image's schematic, then the
// "schematic" pseudo-extension whose version is the schematic ID, as
// Image Factory images carry it (talosctl get extensions).
func addBootImage(st state.State, version, schematic string, exts []string) error {
	ctx := context.Background()

	for _, def := range []meta.ResourceDefinitionSpec{runtime.VersionExtension{}.ResourceDefinition(), runtime.ExtensionStatusExtension{}.ResourceDefinition()} {
		rd, err := meta.NewResourceDefinition(def)
		if err != nil {
			return err
		}

		if err = st.Create(ctx, rd); err != nil {
			return err
		}
	}

	v := runtime.NewVersion()
	v.TypedSpec().Name, v.TypedSpec().Version = "Talos", version

	if err := st.Create(ctx, v, state.WithCreateOwner("runtime.VersionController")); err != nil {
		return err
	}

	layers := append([]string(nil), exts...)
	if schematic != "" {
		layers = append(layers, "schematic")
	}

	for i, name := range layers {
		r := runtime.NewExtensionStatus(runtime.NamespaceName, fmt.Sprint(i))
		spec := r.TypedSpec()
		spec.Image = fmt.Sprintf("%03d.%s.sqsh", i, strings.ReplaceAll(name, "/", "-"))
		spec.Metadata.Name = strings.TrimPrefix(name, "siderolabs/")
		spec.Metadata.Version = version
		spec.Metadata.Author = "Sidero Labs"

		if name == "schematic" {
			spec.Metadata.Version, spec.Metadata.Description = schematic, "Image Factory schematic"
		}

		if err := st.Create(ctx, r, state.WithCreateOwner("runtime.ExtensionStatusController")); err != nil {
			return err
		}
	}

	return nil
}
