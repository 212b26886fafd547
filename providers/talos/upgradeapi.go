package talos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/homelab-migrate/migrate/phases"
)

// How an upgrade reaches a node. Talos 1.13 brought the upgrade talosctl
// uses since: the installer image pulled (ImageService.Pull), the
// installer run by LifecycleService.Upgrade, which streams its output and
// exit code and does not reboot, then a Reboot. MachineService.Upgrade
// (client.UpgradeWithOptions) is the legacy call, marked for removal: it
// is used only for a node whose release has no LifecycleService.
//
// The choice is made by the version the node answers (as talosctl's
// upgrade does), not by trying the new call: the version is read anyway
// for the rollback data, and a call that answers Unimplemented through a
// proxy (apid of another release) would say nothing about the node.

// hasLifecycleAPI says whether a Talos release serves the LifecycleService
// (1.13 on).
func hasLifecycleAPI(version string) bool {
	c, err := coreconfig.ParseContractFromVersion(version)
	return err == nil && c.Greater(coreconfig.TalosVersion1_12)
}

// systemContainerd is where an installer runs from: the system
// namespace (talosctl upgrade's default).
var systemContainerd = &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_SYSTEM}

// pullInstaller pulls the installer image into the node's system
// containerd, logging each layer's progress: every state it enters, and
// its download at each quarter.
func (c *call) pullInstaller(ctx context.Context, n node, image string) error {
	stream, err := n.c.ImageClient.Pull(n.at(ctx), &machineapi.ImageServicePullRequest{Containerd: systemContainerd, ImageRef: image})
	if err != nil {
		return apiErr("ImageService.Pull", err)
	}
	shown := map[string]string{} // layer -> the last state logged
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("ImageService.Pull: the node ended the pull of %s without naming the image", image)
		}
		if err != nil {
			return apiErr("ImageService.Pull", err)
		}
		if name := msg.GetName(); name != "" {
			c.log.Printf("node %s: pulled %s", n.name, name)
			return nil
		}
		layer, p := msg.GetPullProgress().GetLayerId(), msg.GetPullProgress().GetProgress()
		if key := pullStage(p); shown[layer] != key {
			shown[layer] = key
			c.log.Printf("node %s: pulling %s: layer %s: %s", n.name, image, layer, p.Fmt())
		}
	}
}

// pullStage is what a layer's progress says worth a line: its state, and
// for a download the quarter reached.
func pullStage(p *machineapi.ImageServicePullLayerProgress) string {
	st := p.GetStatus().String()
	if p.GetStatus() == machineapi.ImageServicePullLayerProgress_DOWNLOADING && p.GetTotal() > 0 {
		st += fmt.Sprint(4 * p.GetOffset() / p.GetTotal())
	}
	return st
}

// runInstaller runs LifecycleService.Upgrade with the pulled installer,
// each line of its output into the step's log; a non-zero exit code is an
// error naming it with the installer's last line.
func (c *call) runInstaller(ctx context.Context, n node, image string) error {
	stream, err := n.c.LifecycleClient.Upgrade(n.at(ctx), &machineapi.LifecycleServiceUpgradeRequest{
		Containerd: systemContainerd,
		Source:     &machineapi.InstallArtifactsSource{ImageName: image},
	})
	if err != nil {
		return apiErr("LifecycleService.Upgrade", err)
	}
	var last string
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return errors.New("LifecycleService.Upgrade: the installer's output ended without an exit code")
		}
		if err != nil {
			return apiErr("LifecycleService.Upgrade", err)
		}
		switch r := msg.GetProgress().GetResponse().(type) {
		case *machineapi.LifecycleServiceInstallProgress_Message:
			last = r.Message
			c.log.Printf("node %s: installer: %s", n.name, r.Message)
		case *machineapi.LifecycleServiceInstallProgress_ExitCode:
			if r.ExitCode != 0 {
				return fmt.Errorf("the installer exited with code %d (%s)", r.ExitCode, last)
			}
			return nil
		}
	}
}

// bootID reads the node's boot ID, new at every boot: what tells a node
// that rebooted from one that did not, whatever it runs after.
func bootID(ctx context.Context, n node) (string, error) {
	b, err := n.readFile(ctx, "/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b)), err
}

// rebootDeadline bounds the wait for a node to come back from an
// upgrade's reboot: a metal node's firmware, the install's reboot and a
// fallback to the other partition take minutes.
const rebootDeadline = 15 * time.Minute

// waitRebooted waits until the node answers with a boot ID other than
// before ("" when it could not be read: then until it went down and
// answers again).
func waitRebooted(ctx context.Context, n node, before string) error {
	if before == "" {
		waitDown(ctx, n, time.Minute)
		return waitVersion(ctx, n, "")
	}
	ctx, cancel := context.WithTimeout(ctx, rebootDeadline)
	defer cancel()
	backoff := 250 * time.Millisecond
	last := errors.New("the node answers with the boot ID it had before the reboot")
	for {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		id, err := bootID(rctx, n)
		rcancel()
		switch {
		case err != nil:
			last = err
			n.redial()
		case id != before:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// nodeImage is what a node runs: its Talos version, the Image Factory
// schematic of its image ("" when it carries none) and its extensions
// (short names, sorted: "i915", as the node reports them).
type nodeImage struct {
	Version    string   `json:"version"`
	Schematic  string   `json:"schematic,omitempty"`
	Extensions []string `json:"extensions,omitempty"`
}

func (m nodeImage) String() string {
	s := fmt.Sprintf("Talos %s with schematic %s", m.Version, shortID(m.Schematic))
	if len(m.Extensions) > 0 {
		s += " (extensions " + strings.Join(m.Extensions, ", ") + ")"
	} else {
		s += " (no extensions)"
	}
	return s
}

func shortID(id string) string {
	if id == "" {
		return "none"
	}
	if len(id) > 12 {
		return id[:12] + "…"
	}
	return id
}

// extensionNames are official extension names as a node reports them:
// "siderolabs/i915" is "i915", sorted.
func extensionNames(official []string) []string {
	out := make([]string, 0, len(official))
	for _, e := range official {
		out = append(out, path.Base(e))
	}
	slices.Sort(out)
	return out
}

// pinned is what the runbook pins for a version: the provider's
// schematic and its official extensions.
func (c *call) pinned(version string) nodeImage {
	return nodeImage{Version: version, Schematic: c.s.adopted().id, Extensions: extensionNames(c.s.schematic.Customization.SystemExtensions.OfficialExtensions)}
}

// running reads what the node runs: Version, and the ExtensionStatus
// resources (talosctl get extensions), where the "schematic" extension's
// version is the schematic ID of an Image Factory image.
func running(ctx context.Context, n node) (nodeImage, error) {
	v, err := n.version(ctx)
	if err != nil {
		return nodeImage{}, err
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	list, err := safe.StateListAll[*runtime.ExtensionStatus](n.at(ctx), n.c.COSI)
	if err != nil {
		return nodeImage{}, apiErr("COSI List runtime.ExtensionStatus", err)
	}
	m := nodeImage{Version: v, Extensions: []string{}}
	for e := range list.All() {
		meta := e.TypedSpec().Metadata
		switch meta.Name {
		case constants.ImageFactorySchematicExtensionName:
			m.Schematic = meta.Version
		case modulesDep:
			// made by the installer for the extensions' kernel modules: in no schematic
		default:
			m.Extensions = append(m.Extensions, meta.Name)
		}
	}
	slices.Sort(m.Extensions)
	return m, nil
}

// modulesDep is the extension Talos' installer adds when extensions bring
// kernel modules (their combined modules.dep; internal/pkg/extensions).
const modulesDep = "modules.dep"

// matches says whether the node runs what is wanted.
func (m nodeImage) matches(want nodeImage) bool {
	return sameVersion(m.Version, want.Version) && m.Schematic == want.Schematic && slices.Equal(m.Extensions, want.Extensions)
}

// notTaken is the failure of an upgrade the node did not take: what it
// runs, what was wanted, and whether it is what it ran before (it booted
// the other partition).
func notTaken(node string, got, want, before nodeImage) phases.Diagnostics {
	why := "neither what it ran before nor what the runbook pins"
	if got.matches(before) {
		why = "it booted the other partition"
	}
	return phases.Errorf("Upgrade Did Not Take",
		"Node %s came back running %s: %s, so the upgrade to %s did not take. Nothing else changed: the node runs what it ran before this step, its config untouched, and the step is not recorded as done. "+
			"The node's kernel log (in the step's log) says why the new image did not boot; fix that (an extension the machine refuses, a kernel argument, the schematic's contents) and run again, "+
			"or pin what the node runs (version = %q) to leave it as it is.",
		node, got, why, want, got.Version)
}
