package talosnode

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// readChunkSize is the size of the chunks Read streams (machined's chunker).
const readChunkSize = 4096

// server implements machine.MachineServiceServer for a Node. Methods the lab
// does not model answer codes.Unimplemented through the embedded server.
type server struct {
	machine.UnimplementedMachineServiceServer

	n *Node
}

func actorID() string {
	b := make([]byte, 16)
	rand.Read(b) //nolint:errcheck

	return fmt.Sprintf("%s-%s-%s-%s-%s", hex.EncodeToString(b[0:4]), hex.EncodeToString(b[4:6]), hex.EncodeToString(b[6:8]), hex.EncodeToString(b[8:10]), hex.EncodeToString(b[10:]))
}

// ApplyConfiguration implements machine.MachineServiceServer.
func (s *server) ApplyConfiguration(_ context.Context, in *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	return s.n.applyConfiguration(in)
}

// Version implements machine.MachineServiceServer.
func (s *server) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	return &machine.VersionResponse{
		Messages: []*machine.Version{{
			Version: &machine.VersionInfo{
				Tag:       s.n.Version(),
				GoVersion: goruntime.Version(),
				Os:        "linux",
				Arch:      goruntime.GOARCH,
			},
			Platform: &machine.PlatformInfo{Name: "metal", Mode: "metal"},
			Features: &machine.FeaturesInfo{Rbac: true},
		}},
	}, nil
}

// Hostname implements machine.MachineServiceServer.
func (s *server) Hostname(context.Context, *emptypb.Empty) (*machine.HostnameResponse, error) {
	return &machine.HostnameResponse{Messages: []*machine.Hostname{{Hostname: s.n.opts.Hostname}}}, nil
}

// Read implements machine.MachineServiceServer: it streams a regular file
// under the node root in chunks of common.Data.
func (s *server) Read(in *machine.ReadRequest, srv machine.MachineService_ReadServer) error {
	p := in.GetPath()
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // machined runs with cwd "/"
	}

	p = path.Clean(p) // ".." stops at "/" as it does on the node

	rel := strings.TrimPrefix(p, "/")
	if rel == "" {
		rel = "."
	}

	base := s.n.rootDir
	if dir, inMount, ok := s.n.resolveMount(p); ok {
		base, rel = dir, inMount // a virtiofs share: the host directory
	}

	root, err := os.OpenRoot(base)
	if err != nil {
		return err
	}
	defer root.Close() //nolint:errcheck

	fi, err := root.Stat(rel)
	if err != nil {
		return readError(p, err)
	}

	if !fi.Mode().IsRegular() {
		return errors.New("path must be a regular file")
	}

	f, err := root.Open(rel)
	if err != nil {
		return readError(p, err)
	}
	defer f.Close() //nolint:errcheck

	buf := make([]byte, readChunkSize)

	for {
		nr, rerr := f.Read(buf)
		if nr > 0 {
			if err := srv.Send(&common.Data{Bytes: append([]byte(nil), buf[:nr]...)}); err != nil {
				return err
			}
		}

		if errors.Is(rerr, io.EOF) {
			return nil
		}

		if rerr != nil {
			return rerr
		}
	}
}

func readError(p string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return status.Error(codes.NotFound, fmt.Sprintf("stat %s: no such file or directory", p))
	case strings.Contains(err.Error(), "escapes"):
		// a symlink leading out of the simulated root
		return status.Error(codes.PermissionDenied, fmt.Sprintf("read %s: path escapes the lab node root", p))
	default:
		return err
	}
}

func (s *server) checkControlplane(api string) error {
	cfg, err := configloader.NewFromBytes(s.n.Config())
	if err != nil {
		return err
	}

	if cfg.Machine() == nil || !cfg.Machine().Type().IsControlPlane() {
		return status.Errorf(codes.Unimplemented, "%s is only available on control plane nodes", api)
	}

	return nil
}

// Bootstrap implements machine.MachineServiceServer: etcd starts once.
func (s *server) Bootstrap(ctx context.Context, in *machine.BootstrapRequest) (*machine.BootstrapResponse, error) {
	n := s.n

	cfg, err := configloader.NewFromBytes(n.Config())
	if err != nil {
		return nil, err
	}

	if cfg.Machine() == nil || cfg.Machine().Type() == machinetype.TypeWorker {
		return nil, status.Error(codes.FailedPrecondition, "bootstrap can only be performed on a control plane node")
	}

	n.mu.Lock()
	defer n.mu.Unlock()

	etcdDir := filepath.Join(n.rootDir, "var/lib/etcd")
	if entries, _ := os.ReadDir(etcdDir); n.state.Bootstrapped || len(entries) > 0 { //nolint:errcheck
		return nil, status.Error(codes.AlreadyExists, "etcd data directory is not empty")
	}

	if in.GetRecoverEtcd() {
		if err := n.recoverEtcdLocked(ctx, etcdDir, in.GetRecoverSkipHashCheck()); err != nil {
			return nil, err
		}
	} else if err := n.initEtcdLocked(); err != nil {
		return nil, err
	}

	if err := os.MkdirAll(filepath.Join(etcdDir, "member"), 0o700); err != nil {
		return nil, err
	}

	n.state.Bootstrapped = true
	n.etcdSince = time.Now().Add(max(n.opts.EtcdStartup, 0))
	if err := n.saveStateLocked(); err != nil {
		return nil, err
	}

	n.logfLocked(facilityUser, "warning", "[talos] bootstrap request received")
	n.logfLocked(facilityUser, "warning", "[talos] service[etcd](Running): Health check successful")
	n.logfLocked(facilityUser, "warning", "[talos] etcd bootstrapped, cluster %q", n.opts.ClusterName)
	if n.opts.OnBootstrap != nil {
		n.opts.OnBootstrap()
	}
	n.startControlPlaneLocked()

	return &machine.BootstrapResponse{Messages: []*machine.Bootstrap{{}}}, nil
}

// Kubeconfig implements machine.MachineServiceServer: one common.Data
// message holding a .tar.gz with a single file "kubeconfig".
func (s *server) Kubeconfig(_ *emptypb.Empty, srv machine.MachineService_KubeconfigServer) error {
	if err := s.checkControlplane("kubeconfig"); err != nil {
		return err
	}

	cfg, err := configloader.NewFromBytes(s.n.Config())
	if err != nil {
		return err
	}

	kubeconfig, err := adminKubeconfig(cfg)
	if err != nil {
		return err
	}

	var buf bytes.Buffer

	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)

	if err = tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg,
		Name:     "kubeconfig",
		Size:     int64(len(kubeconfig)),
		ModTime:  time.Now(),
		Mode:     0o600,
	}); err != nil {
		return err
	}

	if _, err = tw.Write(kubeconfig); err != nil {
		return err
	}

	if err = tw.Close(); err != nil {
		return err
	}

	if err = zw.Close(); err != nil {
		return err
	}

	return srv.Send(&common.Data{Bytes: buf.Bytes()})
}

// Dmesg implements machine.MachineServiceServer: one line per message,
// formatted like machined ("user: warning: [time]: [talos] ...").
func (s *server) Dmesg(in *machine.DmesgRequest, srv machine.MachineService_DmesgServer) error {
	ctx := srv.Context()

	from := 0
	if in.GetTail() {
		_, from, _ = s.n.kmsgSince(1 << 62)
	}

	for {
		lines, next, notify := s.n.kmsgSince(from)
		for _, l := range lines {
			if err := srv.Send(&common.Data{Bytes: []byte(l.format())}); err != nil {
				return err
			}
		}

		from = next

		if !in.GetFollow() {
			return nil
		}

		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-notify:
		}
	}
}

// ServiceList implements machine.MachineServiceServer.
func (s *server) ServiceList(context.Context, *emptypb.Empty) (*machine.ServiceListResponse, error) {
	n := s.n

	n.mu.Lock()
	bootstrapped := n.state.Bootstrapped
	boot := n.bootTime
	since := n.etcdSince
	n.mu.Unlock()

	etcdRunning := n.etcdHealthy(bootstrapped, since)

	running := func(id string) *machine.ServiceInfo {
		return &machine.ServiceInfo{
			Id:    id,
			State: "Running",
			Events: &machine.ServiceEvents{Events: []*machine.ServiceEvent{
				{Msg: "Starting service", State: "Starting", Ts: timestamppb.New(boot)},
				{Msg: "Health check successful", State: "Running", Ts: timestamppb.New(boot)},
			}},
			Health: &machine.ServiceHealth{Healthy: true, LastChange: timestamppb.New(boot)},
		}
	}

	services := []*machine.ServiceInfo{}
	for _, id := range []string{"apid", "containerd", "cri", "kubelet", "machined", "syslogd", "trustd", "udevd"} {
		services = append(services, running(id))
	}

	if etcdRunning {
		services = append(services, running("etcd"))
	} else {
		services = append(services, &machine.ServiceInfo{
			Id:    "etcd",
			State: "Preparing",
			Events: &machine.ServiceEvents{Events: []*machine.ServiceEvent{
				{Msg: "Running pre state", State: "Preparing", Ts: timestamppb.New(boot)},
			}},
			Health: &machine.ServiceHealth{Unknown: true},
		})
	}

	sort.Slice(services, func(i, j int) bool { return services[i].Id < services[j].Id })

	return &machine.ServiceListResponse{Messages: []*machine.ServiceList{{Services: services}}}, nil
}

// Upgrade implements machine.MachineServiceServer: the node reboots into
// the installer image's version (or stages it for the next reboot).
func (s *server) Upgrade(_ context.Context, in *machine.UpgradeRequest) (*machine.UpgradeResponse, error) {
	n := s.n
	image := in.GetImage()

	if _, err := imageTag(image); err != nil {
		return nil, fmt.Errorf("error validating installer image %q: %w", image, err)
	}

	cfg, err := configloader.NewFromBytes(n.Config())
	if err != nil {
		return nil, err
	}

	n.mu.Lock()
	defer n.mu.Unlock()

	if cfg.Machine() != nil && cfg.Machine().Type() != machinetype.TypeWorker && !in.GetForce() && !n.state.Bootstrapped {
		return nil, errors.New("failed to create etcd client: etcd is not running on this node (not bootstrapped); use force to skip the etcd checks")
	}

	n.logfLocked(facilityUser, "warning", "[talos] upgrade request received: staged %v, force %v, reboot mode %v", in.GetStage(), in.GetForce(), in.GetRebootMode().String())
	n.logfLocked(facilityUser, "warning", "[talos] validating %q", image)

	// the "installer" runs at the next boot: now, or at the next reboot when staged
	n.state.StagedUpgrade = image
	if err := n.saveStateLocked(); err != nil {
		return nil, err
	}

	if in.GetStage() {
		n.logfLocked(facilityUser, "warning", "[talos] upgrade staged, it will be installed on the next reboot")
	} else {
		n.scheduleReboot("upgrade to " + image)
	}

	return &machine.UpgradeResponse{Messages: []*machine.Upgrade{{Ack: "Upgrade request received", ActorId: actorID()}}}, nil
}

// Reboot implements machine.MachineServiceServer.
func (s *server) Reboot(context.Context, *machine.RebootRequest) (*machine.RebootResponse, error) {
	s.n.logf(facilityUser, "warning", "[talos] reboot via API received")
	s.n.scheduleReboot("reboot via API")

	return &machine.RebootResponse{Messages: []*machine.Reboot{{ActorId: actorID()}}}, nil
}
