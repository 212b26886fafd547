package talosnode

import (
	blockpb "github.com/siderolabs/talos/pkg/machinery/api/resource/definitions/block"
	"github.com/siderolabs/talos/pkg/machinery/proto"

	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	stdx509 "crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/cel"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"go.yaml.in/yaml/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// installMode is the runtime mode of a metal node booted from the ISO: the
// config must say where to install (RequiresInstall).
type installMode struct{ metalMode }

func (installMode) RequiresInstall() bool { return true }

// maintenanceRules: in maintenance mode every client is os:reader (machined's
// authz injector in ReadOnly mode); ApplyConfiguration is opened to readers
// there only.
var maintenanceRules = map[string]role.Set{
	"/machine.MachineService/ApplyConfiguration": role.MakeSet(role.Admin, role.Reader),
	"/cosi.resource.State/Get":                   role.MakeSet(role.Admin, role.Reader),
	"/cosi.resource.State/List":                  role.MakeSet(role.Admin, role.Reader),
	"/cosi.resource.State/Watch":                 role.MakeSet(role.Admin, role.Reader),
}

// initMaintenance boots the node without a config: no PKI yet, a
// self-signed certificate for the maintenance API.
func (n *Node) initMaintenance() error {
	var err error

	if n.resources, err = newResources(n.opts.Disks, n.opts.NICs, ""); err != nil {
		return err
	}

	if err = addBootImage(n.resources, n.state.Version, n.opts.BootSchematic, n.opts.BootExtensions); err != nil {
		return err
	}

	if n.maintCert, err = selfSignedCertificate(n.opts.Hostname); err != nil {
		return err
	}

	n.mu.Lock()
	defer n.mu.Unlock()

	n.maintenance = true
	n.bootTime = time.Now()
	n.bootCtx, n.rebootCancel = context.WithCancel(context.Background())
	n.logfLocked(facilityKern, "notice", "Linux version 6.18.0-talos (root@buildkitsandbox) (gcc (GCC) 15.2.0, GNU ld (GNU Binutils) 2.45) #1 SMP")
	n.logfLocked(facilityUser, "warning", "[talos] talosctl version %s booting (maintenance mode, no machine config)", n.state.Version)
	n.logfLocked(facilityUser, "warning", "[talos] entering maintenance service")
	n.modulesLocked(n.opts.BootExtensions)

	return nil
}

// selfSignedCertificate is the maintenance service's certificate: made at
// boot, signed by nobody the client knows (talosctl --insecure skips
// verification).
func selfSignedCertificate(hostname string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}

	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, err
	}

	now := time.Now()
	tmpl := &stdx509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "maintenance-service"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback},
		DNSNames:              []string{"localhost", hostname},
		KeyUsage:              stdx509.KeyUsageDigitalSignature | stdx509.KeyUsageCertSign,
		ExtKeyUsage:           []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}

	der, err := stdx509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}

	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// maintenanceCredentials: TLS with the self-signed certificate, no client
// certificate asked for.
func (n *Node) maintenanceCredentials() credentials.TransportCredentials {
	return credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{n.maintCert},
		ClientAuth:   tls.NoClientCert,
		MinVersion:   tls.VersionTLS12,
	})
}

// maintenanceCheck is what runs before a maintenance handler: the node going
// down for the install, injected faults, the reader-only authorization.
func (n *Node) maintenanceCheck(ctx context.Context, fullMethod string) error {
	n.mu.Lock()
	down := time.Now().Before(n.unavailable)
	f, faulty := n.faults[methodName(fullMethod)]
	n.mu.Unlock()

	if down {
		return status.Error(codes.Unavailable, "maintenance service is shutting down")
	}

	if faulty {
		if f.hang {
			<-ctx.Done()

			return status.FromContextError(ctx.Err()).Err()
		}

		return f.err
	}

	allowed, ok := maintenanceRules[fullMethod]
	if !ok {
		allowed, ok = rules[fullMethod]
	}

	if !ok {
		allowed = role.MakeSet(role.Admin)
	}

	if !allowed.Includes(role.Reader) {
		return status.Error(codes.PermissionDenied, "not authorized")
	}

	return nil
}

func (n *Node) maintenanceUnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := n.maintenanceCheck(ctx, info.FullMethod); err != nil {
		return nil, err
	}

	return handler(ctx, req)
}

func (n *Node) maintenanceStreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := n.maintenanceCheck(ss.Context(), info.FullMethod); err != nil {
		return err
	}

	return handler(srv, ss)
}

// maintenanceServer is machined's maintenance service (Talos v1.13):
// ApplyConfiguration for anyone; Version, Upgrade, Reset, MetaWrite need
// os:admin, which only a SideroLink peer gets, so they answer Unimplemented.
type maintenanceServer struct {
	machine.UnimplementedMachineServiceServer

	n *Node
}

var errNotInMaintenance = status.Error(codes.Unimplemented, "API is not implemented in maintenance mode")

// Version implements machine.MachineServiceServer: refused to a client
// that is not a SideroLink peer (every lab client).
func (s *maintenanceServer) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	return nil, errNotInMaintenance
}

// Upgrade implements machine.MachineServiceServer.
func (s *maintenanceServer) Upgrade(context.Context, *machine.UpgradeRequest) (*machine.UpgradeResponse, error) {
	return nil, errNotInMaintenance
}

// Reset implements machine.MachineServiceServer.
func (s *maintenanceServer) Reset(context.Context, *machine.ResetRequest) (*machine.ResetResponse, error) {
	return nil, errNotInMaintenance
}

// GenerateClientConfiguration implements machine.MachineServiceServer.
func (s *maintenanceServer) GenerateClientConfiguration(context.Context, *machine.GenerateClientConfigurationRequest) (*machine.GenerateClientConfigurationResponse, error) {
	return nil, status.Error(codes.Unimplemented, "client configuration (talosconfig) can't be generated in the maintenance mode")
}

// ApplyConfiguration implements machine.MachineServiceServer: the first
// config. It is validated as for a node that must install, then the node
// installs and reboots into it.
func (s *maintenanceServer) ApplyConfiguration(_ context.Context, in *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	n := s.n

	n.mu.Lock()
	defer n.mu.Unlock()

	rec := ApplyRecord{
		Time:          time.Now(),
		Mode:          in.GetMode().String(),
		EffectiveMode: "INSTALL",
		DryRun:        in.GetDryRun(),
		ConfigHash:    hashConfig(in.GetData()),
	}

	resp, err := n.maintenanceApplyLocked(in)
	if err != nil {
		rec.Err = err.Error()
	}

	n.applies = append(n.applies, rec)

	return resp, err
}

func (n *Node) maintenanceApplyLocked(in *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	//nolint:exhaustive
	switch in.GetMode() {
	case machine.ApplyConfigurationRequest_TRY, machine.ApplyConfigurationRequest_REBOOT, machine.ApplyConfigurationRequest_AUTO:
	default:
		return nil, status.Errorf(codes.Unimplemented, "apply configuration --mode='%s' is not supported in maintenance mode",
			strings.ReplaceAll(strings.ToLower(in.GetMode().String()), "_", "-"))
	}

	cfg, err := configloader.NewFromBytes(in.GetData())
	if err != nil {
		return nil, fmt.Errorf("failed to parse config: %w", err)
	}

	if err = checkReleaseKinds(n.state.Version, cfg); err != nil {
		return nil, fmt.Errorf("failed to parse config: %w", err)
	}

	warnings, err := cfg.Validate(installMode{})
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "configuration validation failed: %s", err)
	}

	reply := &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{Warnings: warnings}}}

	if in.GetDryRun() {
		reply.Messages[0].ModeDetails = "Dry run summary:\nNode is running in maintenance mode and does not have a config yet."

		return reply, nil
	}

	if n.installing {
		// the maintenance service stops on the first config it takes
		return nil, status.Error(codes.Unavailable, "maintenance service is shutting down")
	}

	n.installing = true
	n.logfLocked(facilityUser, "warning", "[talos] machine configuration applied in maintenance mode {\"config\": \"sha256:%s\"}", hashConfig(in.GetData())[:12])
	if n.opts.OnMaintenanceApply != nil {
		n.opts.OnMaintenanceApply(hashConfig(in.GetData()))
	}
	n.scheduleInstall(cfg, append([]byte(nil), in.GetData()...))

	return reply, nil
}

// scheduleInstall runs the install after the reply is sent: the
// maintenance service stops (connections refused), the "installer" writes
// the system disk (the config persisted, the image and disk recorded),
// and after RebootDuration the installed node serves mTLS with the
// config's PKI. An install that fails (the install disk is not one of the
// node's disks, the image has no tag) logs why and the node boots back
// into maintenance mode, as one booted from the ISO again would.
func (n *Node) scheduleInstall(cfg config.Provider, data []byte) {
	n.rebootPending.Add(1)

	go func() {
		defer n.rebootPending.Done()

		time.Sleep(50 * time.Millisecond)

		n.mu.Lock()
		if n.stopped {
			n.mu.Unlock()

			return
		}

		n.unavailable = time.Now().Add(24 * time.Hour)
		srv, done, addr := n.server, n.serveDone, n.addr
		n.mu.Unlock()

		srv.Stop()
		<-done

		n.mu.Lock()
		if n.stopped {
			n.mu.Unlock()

			return
		}

		installErr := n.installLockedFromMaintenance(cfg, data)
		if installErr != nil {
			n.installFailures = append(n.installFailures, installErr.Error())
			n.logfLocked(facilityUser, "error", "[talos] install failed: %s", installErr)
		} else {
			n.logfLocked(facilityKern, "notice", "reboot: Restarting system")
		}
		n.mu.Unlock()

		time.Sleep(n.opts.RebootDuration)

		n.mu.Lock()
		if n.stopped {
			n.mu.Unlock()

			return
		}

		if installErr == nil {
			n.maintenance = false
			n.bootLocked("installed")
		} else {
			n.installing = false
			n.logfLocked(facilityUser, "warning", "[talos] entering maintenance service")
			n.modulesLocked(n.opts.BootExtensions)
		}

		n.unavailable = time.Time{}
		err := n.serveLocked(addr)
		n.mu.Unlock()

		if err != nil {
			n.logf(facilityUser, "error", "[talos] apid: %s", err)

			return
		}

		if installErr == nil {
			if err = n.writeTalosconfig(); err != nil {
				n.logf(facilityUser, "error", "[talos] talosconfig: %s", err)
			}

			close(n.installed)
		}
	}()
}

// installLockedFromMaintenance is the installer: it checks the install
// disk and image, then persists what the installed node boots with.
func (n *Node) installLockedFromMaintenance(cfg config.Provider, data []byte) error {
	if cfg.Machine() == nil {
		return errors.New("the config has no machine section")
	}

	image, disk, err := installTarget(cfg, n.opts.Disks)
	if err != nil {
		return err
	}

	tag, err := imageTag(image)
	if err != nil {
		return fmt.Errorf("error validating installer image %q: %w", image, err)
	}

	n.logfLocked(facilityUser, "warning", "[talos] installing Talos %s from %s to %s", tag, image, disk)

	bundle, err := secrets.NewBundleFromConfig(secrets.NewClock(), cfg)
	if err != nil {
		return fmt.Errorf("error reading the secrets of the config: %w", err)
	}

	var buf strings.Builder

	enc := yaml.NewEncoder(&buf)
	if err = enc.Encode(bundle); err != nil {
		return err
	}

	if err = enc.Close(); err != nil {
		return err
	}

	if err = os.MkdirAll(filepath.Join(n.rootDir, filepath.Dir(ConfigPath)), 0o700); err != nil {
		return err
	}

	if err = writeFileAtomic(n.SecretsPath(), []byte(buf.String()), 0o600); err != nil {
		return err
	}

	n.bundle = bundle
	if err = n.issueCertificates(); err != nil {
		return err
	}

	if err = setSystemDisk(n.resources, n.opts.Disks, disk); err != nil {
		return err
	}

	n.useClusterName(cfg)

	n.state.Version = tag
	n.state.InstallImage = image
	n.state.Image = image
	n.state.InstallDisk = disk

	if err = n.saveStateLocked(); err != nil {
		return err
	}

	// last: a persisted config is what makes the node boot installed
	return n.persistLocked(data)
}

// Maintenance reports whether the node serves the maintenance API (it has
// no config yet).
func (n *Node) Maintenance() bool {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.maintenance
}

// Installed is closed once the node serves its installed mTLS API (at once
// for a node that did not start in maintenance mode).
func (n *Node) Installed() <-chan struct{} { return n.installed }

// Install returns the installer image and the disk of the install from
// maintenance mode ("" before it).
func (n *Node) Install() (image, disk string) {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.state.InstallImage, n.state.InstallDisk
}

// InstallFailures returns why installs from maintenance mode failed (oldest
// first).
func (n *Node) InstallFailures() []string {
	n.mu.Lock()
	defer n.mu.Unlock()

	return append([]string(nil), n.installFailures...)
}

// useClusterName names the talosconfig context and the cluster in logs
// after the config the node was installed with, not Options.ClusterName.
func (n *Node) useClusterName(cfg config.Provider) {
	if cl := cfg.K8sClusterConfig(); cl != nil && cl.ClusterName() != "" {
		n.contextName = cl.ClusterName()
		n.opts.ClusterName = cl.ClusterName()
	}
}

// installTarget is the installer image and install disk of a config:
// Talos 1.14's UnattendedInstallConfig document (its disk selector matched
// against the machine's disks, exactly one), else 1.13's machine.install:
// its disk, or its diskSelector as the installer reads it (machinery's
// DiskMatchExpression, matched the same way).
func installTarget(cfg config.Provider, disks []Disk) (image, disk string, err error) {
	if u := cfg.UnattendedInstallConfig(); u != nil {
		sel := u.VolumeSelector()
		if sel.IsZero() {
			return "", "", errors.New("UnattendedInstallConfig: provisioning.diskSelector is required")
		}

		disk, err := selectInstallDisk(sel, disks)
		if err != nil {
			return "", "", fmt.Errorf("UnattendedInstallConfig: %w", err)
		}

		return u.InstallerImage(), disk, nil
	}

	install := cfg.Machine().Install()
	if disk = install.Disk(); disk == "" {
		sel, err := install.DiskMatchExpression()
		if err != nil {
			return "", "", fmt.Errorf("install.diskSelector: %w", err)
		}

		if sel == nil {
			return "", "", errors.New("failed to install: neither install.disk nor install.diskSelector is set")
		}

		if disk, err = selectInstallDisk(*sel, disks); err != nil {
			return "", "", fmt.Errorf("install.diskSelector: %w", err)
		}

		return install.Image(), disk, nil
	}

	if _, ok := findDisk(disks, disk); !ok {
		return "", "", fmt.Errorf("failed to install: install disk %s not found", disk)
	}

	return install.Image(), disk, nil
}

// selectInstallDisk is the one disk an install disk selector matches.
func selectInstallDisk(sel cel.Expression, disks []Disk) (string, error) {
	var matched []string

	for _, d := range disks {
		// The selector sees the disk as the node's volume manager
		// shows it to CEL: the protobuf DiskSpec.
		spec := &blockpb.DiskSpec{}
		if err := proto.ResourceSpecToProto(d.resource(), spec); err != nil {
			return "", fmt.Errorf("disk %s: %w", d.Name, err)
		}

		ok, err := sel.EvalBool(celenv.DiskLocator(), map[string]any{"disk": spec, "system_disk": false})
		if err != nil {
			return "", fmt.Errorf("disk selector: %w", err)
		}

		if ok {
			matched = append(matched, d.Name)
		}
	}

	switch len(matched) {
	case 0:
		return "", fmt.Errorf("failed to install: no disk matches the install disk selector %q", sel.String())
	case 1:
		return matched[0], nil
	default:
		return "", fmt.Errorf("failed to install: the install disk selector %q matches %d disks (%s)", sel.String(), len(matched), strings.Join(matched, ", "))
	}
}

// installImage is the installer image a config names (either shape), ""
// when it names none.
func installImage(cfg config.Provider) string {
	if u := cfg.UnattendedInstallConfig(); u != nil {
		return u.InstallerImage()
	}

	if cfg.Machine() == nil {
		return ""
	}

	return cfg.Machine().Install().Image()
}
