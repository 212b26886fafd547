package talosnode_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"

	"github.com/homelab-migrate/migrate/lab/talosnode"
)

const (
	oldSchematic = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	newSchematic = "dc8730aa8cc7bfa5ef7e2b3284248f2631135b2faf4ae11aa997a0c1987b0eee"
)

// factoryExtensions is the lab factory's view: the new schematic carries i915.
func factoryExtensions(image string) []string {
	if talosnode.SchematicOf(image) == newSchematic {
		return []string{"siderolabs/i915"}
	}

	return nil
}

// connectDirect connects without node metadata, so that errors are gRPC
// statuses (as with "node"), not messages ("nodes").
func connectDirect(t *testing.T, n *talosnode.Node) (*client.Client, context.Context) {
	t.Helper()

	c, _ := connect(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)

	return c, ctx
}

// pull pulls an image as talosctl image pull does, returning its pinned name.
func pull(ctx context.Context, c *client.Client, image string) (string, error) {
	stream, err := c.ImageClient.Pull(ctx, &machine.ImageServicePullRequest{
		Containerd: &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_SYSTEM},
		ImageRef:   image,
	})
	if err != nil {
		return "", err
	}

	for {
		msg, err := stream.Recv()
		if err != nil {
			return "", err
		}

		if name := msg.GetName(); name != "" {
			return name, nil
		}
	}
}

// lifecycleUpgrade runs LifecycleService.Upgrade: its lines and exit code.
func lifecycleUpgrade(ctx context.Context, c *client.Client, image string) ([]string, int32, error) {
	stream, err := c.LifecycleClient.Upgrade(ctx, &machine.LifecycleServiceUpgradeRequest{Source: &machine.InstallArtifactsSource{ImageName: image}})
	if err != nil {
		return nil, 0, err
	}

	var lines []string

	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return lines, -1, errors.New("no exit code")
		}

		if err != nil {
			return lines, 0, err
		}

		switch p := msg.GetProgress().GetResponse().(type) {
		case *machine.LifecycleServiceInstallProgress_Message:
			lines = append(lines, p.Message)
		case *machine.LifecycleServiceInstallProgress_ExitCode:
			return lines, p.ExitCode, nil
		}
	}
}

// reported is what talosctl get extensions shows: the schematic and the
// other extensions' names.
func reported(t *testing.T, c *client.Client) (schematic string, names []string) {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	list, err := safe.StateListAll[*runtime.ExtensionStatus](ctx, c.COSI)
	if err != nil {
		t.Fatal(err)
	}

	for e := range list.All() {
		if m := e.TypedSpec().Metadata; m.Name == "schematic" {
			schematic = m.Version
		} else {
			names = append(names, m.Name)
		}
	}

	return schematic, names
}

func upgradeThroughLifecycle(t *testing.T, ctx context.Context, c *client.Client, image string) {
	t.Helper()

	if _, err := pull(ctx, c, image); err != nil {
		t.Fatalf("pull: %v", err)
	}

	lines, code, err := lifecycleUpgrade(ctx, c, image)
	if err != nil || code != 0 {
		t.Fatalf("upgrade: exit %d, %v: %v", code, err, lines)
	}

	if err = c.Reboot(ctx); err != nil {
		t.Fatal(err)
	}

	waitReboot(t, ctx, c)
}

// TestLifecycleUpgradeBootsTheOtherPartition: the installer needs a pulled
// image, writes the other partition, and the reboot runs it; the node
// reports the new version, schematic and extensions.
func TestLifecycleUpgradeBootsTheOtherPartition(t *testing.T) {
	n := startNode(t, talosnode.Options{Version: "v1.13.2", Extensions: factoryExtensions})
	c, ctx := connectDirect(t, n)
	image := "factory.talos.dev/metal-installer/" + newSchematic + ":v1.13.3"

	_, _, err := lifecycleUpgrade(ctx, c, image)
	wantCode(t, err, codes.Internal, "not found in containerd store")

	upgradeThroughLifecycle(t, ctx, c, image)

	if n.Version() != "v1.13.3" {
		t.Fatalf("version %s after the upgrade", n.Version())
	}

	if schematic, names := reported(t, c); schematic != newSchematic || !slices.Equal(names, []string{"i915", "modules.dep"}) {
		t.Errorf("reported schematic %q, extensions %v", schematic, names)
	}

	running, other := n.Boot()
	if running.Partition != "B" || running.Version != "v1.13.3" || other.Partition != "A" || other.Version != "v1.13.2" {
		t.Errorf("boot entries: running %+v, other %+v", running, other)
	}

	// the pulled image was in memory: gone after the reboot
	_, _, err = lifecycleUpgrade(ctx, c, image)
	wantCode(t, err, codes.Internal, "not found in containerd store")
}

// TestUpgradeFallsBackToTheOtherPartition: a new partition that fails to
// boot leaves the node running what it ran, and saying so in its log only.
func TestUpgradeFallsBackToTheOtherPartition(t *testing.T) {
	n := startNode(t, talosnode.Options{Version: "v1.13.2", Extensions: factoryExtensions})
	c, ctx := connectDirect(t, n)

	n.FallBackAtNextUpgrade()
	upgradeThroughLifecycle(t, ctx, c, "factory.talos.dev/metal-installer/"+newSchematic+":v1.13.3")

	if n.Version() != "v1.13.2" {
		t.Fatalf("version %s after a fallback", n.Version())
	}

	if schematic, names := reported(t, c); schematic != "" || len(names) != 0 {
		t.Errorf("reported schematic %q, extensions %v after a fallback", schematic, names)
	}

	if !dmesgContains(t, ctx, c, "failed to boot") {
		t.Error("dmesg does not say the new partition failed to boot")
	}

	// the next upgrade boots
	upgradeThroughLifecycle(t, ctx, c, "factory.talos.dev/metal-installer/"+oldSchematic+":v1.13.3")

	if schematic, _ := reported(t, c); n.Version() != "v1.13.3" || schematic != oldSchematic {
		t.Errorf("after the second upgrade: %s, schematic %q", n.Version(), schematic)
	}
}

// TestOlderReleaseHasNoLifecycleService: Talos 1.12 answers Unimplemented
// to the new services; the legacy call upgrades it.
func TestOlderReleaseHasNoLifecycleService(t *testing.T) {
	n := startNode(t, talosnode.Options{Version: "v1.12.6"})
	c, ctx := connectDirect(t, n)
	image := "factory.talos.dev/metal-installer/" + oldSchematic + ":v1.13.3"

	_, err := pull(ctx, c, image)
	wantCode(t, err, codes.Unimplemented, "unknown service machine.ImageService")

	_, _, err = lifecycleUpgrade(ctx, c, image)
	wantCode(t, err, codes.Unimplemented, "unknown service machine.LifecycleService")

	if _, err = c.UpgradeWithOptions(ctx, client.WithUpgradeImage(image), client.WithUpgradeForce(true)); err != nil {
		t.Fatal(err)
	}

	waitReboot(t, ctx, c)

	if schematic, _ := reported(t, c); n.Version() != "v1.13.3" || schematic != oldSchematic {
		t.Errorf("after the legacy upgrade: %s, schematic %q", n.Version(), schematic)
	}

	if !strings.HasPrefix(n.Version(), "v1.13") {
		t.Errorf("version %s", n.Version())
	}
}
