package talosnode

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Talos 1.13 brought the upgrade talosctl uses since: the installer image
// pulled with ImageService.Pull, then LifecycleService.Upgrade running
// the installer and streaming its output and exit code, then a Reboot of
// its own. A node of an older release has neither service: gRPC answers
// Unimplemented, and only MachineService.Upgrade (the legacy call) works.

// servesLifecycle says whether a Talos release has the ImageService and
// LifecycleService (1.13 on).
func servesLifecycle(version string) bool {
	c, err := config.ParseContractFromVersion(version)

	return err == nil && c.Greater(config.TalosVersion1_12)
}

// errNoService is gRPC's answer for a service the server does not
// register, as an older release's apid gives it.
func errNoService(svc string) error {
	return status.Errorf(codes.Unimplemented, "unknown service machine.%s", svc)
}

// imageServer implements machine.ImageServiceServer: Pull only.
type imageServer struct {
	machine.UnimplementedImageServiceServer

	n *Node
}

// Pull "pulls" an image into the system containerd (the only namespace
// an installer runs from): it streams the progress of one layer, then
// the image's name pinned to its digest, as machined does. The image is
// then in the store until the next boot.
func (s *imageServer) Pull(in *machine.ImageServicePullRequest, srv grpc.ServerStreamingServer[machine.ImageServicePullResponse]) error {
	n := s.n
	if !servesLifecycle(n.Version()) {
		return errNoService("ImageService")
	}

	ref := in.GetImageRef()

	tag, err := imageTag(ref)
	if err != nil {
		return status.Errorf(codes.NotFound, "error pulling image: %s: not found", ref)
	}

	digest := sha256.Sum256([]byte(ref)) // the lab pulls nothing: a stable stand-in digest
	layer := "sha256:" + hex.EncodeToString(digest[:])
	total := int64(len(ref)) << 20

	for _, p := range []*machine.ImageServicePullLayerProgress{
		{Status: machine.ImageServicePullLayerProgress_DOWNLOADING, Offset: total / 2, Total: total},
		{Status: machine.ImageServicePullLayerProgress_DOWNLOAD_COMPLETE, Offset: total, Total: total},
		{Status: machine.ImageServicePullLayerProgress_EXTRACTING, Elapsed: durationpb.New(time.Second)},
		{Status: machine.ImageServicePullLayerProgress_EXTRACT_COMPLETE},
	} {
		if err := srv.Send(&machine.ImageServicePullResponse{Response: &machine.ImageServicePullResponse_PullProgress{
			PullProgress: &machine.ImageServicePullProgress{LayerId: layer[:19], Progress: p},
		}}); err != nil {
			return err
		}
	}

	n.mu.Lock()
	n.pulled[ref] = struct{}{}
	n.mu.Unlock()

	// the name pinned to its digest, without the tag (machined's answer)
	name := strings.TrimSuffix(ref, ":"+tag)

	return srv.Send(&machine.ImageServicePullResponse{Response: &machine.ImageServicePullResponse_Name{Name: name + "@" + layer}})
}

// lifecycleServer implements machine.LifecycleServiceServer.
type lifecycleServer struct {
	machine.UnimplementedLifecycleServiceServer

	n *Node
}

// Install answers as an installed node does.
func (s *lifecycleServer) Install(*machine.LifecycleServiceInstallRequest, grpc.ServerStreamingServer[machine.LifecycleServiceInstallResponse]) error {
	if !servesLifecycle(s.n.Version()) {
		return errNoService("LifecycleService")
	}

	return status.Error(codes.AlreadyExists, "machine is already installed")
}

// Upgrade runs the installer of a pulled image: it writes the image's
// version to the other boot partition, streaming the installer's lines
// and its exit code, and does not reboot (the client asks for that).
// Refused as machined refuses: no image name, an image not in the system
// containerd's store.
func (s *lifecycleServer) Upgrade(in *machine.LifecycleServiceUpgradeRequest, srv grpc.ServerStreamingServer[machine.LifecycleServiceUpgradeResponse]) error {
	n := s.n
	if !servesLifecycle(n.Version()) {
		return errNoService("LifecycleService")
	}

	image := in.GetSource().GetImageName()
	if image == "" {
		return status.Error(codes.InvalidArgument, "installer image name is required")
	}

	lines, code, err := n.upgradeWith(image)
	if err != nil {
		return err
	}

	for _, l := range lines {
		if err := srv.Send(&machine.LifecycleServiceUpgradeResponse{Progress: &machine.LifecycleServiceInstallProgress{
			Response: &machine.LifecycleServiceInstallProgress_Message{Message: l},
		}}); err != nil {
			return err
		}
	}

	return srv.Send(&machine.LifecycleServiceUpgradeResponse{Progress: &machine.LifecycleServiceInstallProgress{
		Response: &machine.LifecycleServiceInstallProgress_ExitCode{ExitCode: code},
	}})
}

// upgradeWith runs the installer: its output lines and exit code, or the
// error machined answers before it starts one.
func (n *Node) upgradeWith(image string) (lines []string, code int32, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()

	if _, ok := n.pulled[image]; !ok {
		return nil, 0, status.Errorf(codes.Internal, "upgrade failed: installer image %q not found in containerd store: image %q: not found", image, image)
	}

	n.logfLocked(facilityUser, "info", "[talos] starting upgrade {\"service\": \"lifecycle\", \"installer_image\": %q}", image)

	cur := n.runningLocked()
	lines = append(lines, fmt.Sprintf("upgrading Talos %s (boot entry %s) with %s", cur.Version, cur.Partition, image))

	if err := n.runInstallerLocked(image); err != nil {
		n.logfLocked(facilityUser, "warning", "[talos] upgrade failed {\"exit_code\": 1}: %s", err)

		return append(lines, "error: "+err.Error()), 1, nil
	}

	next := n.state.Next

	return append(lines, fmt.Sprintf("installed Talos %s to boot entry %s: it boots at the next reboot", next.Version, next.Partition)), 0, nil
}
