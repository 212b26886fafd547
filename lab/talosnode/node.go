package talosnode

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	cosiv1alpha1 "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/state"
	cosiserver "github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"google.golang.org/grpc"
)

// Defaults for Options.
const (
	DefaultVersion        = "v1.13.3"
	DefaultHostname       = "lab-node"
	DefaultClusterName    = "lab"
	DefaultEndpoint       = "https://127.0.0.1:6443"
	DefaultInstallDisk    = "/dev/sda"
	DefaultRebootDuration = time.Second
	DefaultEtcdStartup    = time.Second

	// ConfigPath is where a Talos node keeps its persisted machine config; Read serves it.
	ConfigPath = "/system/state/config.yaml"
	// BootIDPath holds a new random id at every (simulated) boot, as on Linux.
	BootIDPath = "/proc/sys/kernel/random/boot_id"
	// DataMount is the simulated virtiofs mount (ExternalVolumeConfig) created under Root
	// of a node without Options.Shares.
	DataMount = "/var/mnt/data"
)

// Options configure a lab node.
type Options struct {
	Dir               string // working dir: secrets.yaml, talosconfig, the node's config and simulated filesystem live here
	Version           string // Talos version the node runs, default "v1.13.3"
	KubernetesVersion string // default: KubernetesVersionOf(Version)
	Hostname          string // default "lab-node"
	ClusterName       string // default "lab"

	// Endpoint is the Kubernetes control plane endpoint written into the
	// initial machine config (and so into Kubeconfig), default
	// "https://127.0.0.1:6443".
	Endpoint string
	// RebootDuration is how long a simulated reboot keeps the API
	// unavailable, default 1s.
	RebootDuration time.Duration
	// TryRollbackFix models Talos after siderolabs/talos#14345: a dry run or a
	// rejected apply no longer cancels a pending TRY rollback. Off by default:
	// v1.13 nodes cancel the pending rollback at the start of every non-TRY
	// ApplyConfiguration call, before validation and before the dry-run check.
	TryRollbackFix bool
	// EtcdStartup is how long etcd stays "Preparing" (health unknown)
	// after the bootstrap before it runs healthy, as on a node where etcd
	// takes a moment to start; default DefaultEtcdStartup, negative for
	// none.
	EtcdStartup time.Duration
	// Maintenance starts a node that has no persisted config as one booted
	// from the Talos ISO: the maintenance API over self-signed TLS until
	// the first ApplyConfiguration installs it (see maintenance.go). A node
	// that is installed already boots installed.
	Maintenance bool
	// Disks are the machine's disks (block.Disk resources), default
	// DefaultDisks.
	Disks []Disk
	// NICs are the machine's network interfaces (network.LinkStatus
	// resources, with lo), default one eth0 with a MAC of 10:66:6a:…
	// stable for Dir.
	NICs []NIC
	// Addresses are the node's own IP addresses (besides loopback): its
	// certificates name them, as on a node.
	Addresses []string
	// Shares are the VM's virtiofs shares: tag -> host directory. An
	// ExternalVolumeConfig of type virtiofs whose source is a tag mounts
	// that directory at /var/mnt/<name> (Read serves it); without one
	// nothing is mounted. A node with no Shares (nil: not a VM) has an
	// empty DataMount directory under its root instead.
	Shares map[string]string
	// GPU: the VM has the iGPU (0000:00:02.0). Its driver (i915 in
	// /proc/modules, its [drm] lines in dmesg) loads only when the
	// installed image's schematic carries siderolabs/i915 (Extensions).
	GPU bool
	// BootSchematic and BootExtensions are the image the node boots in
	// maintenance mode (the ISO): its schematic ID and official
	// extensions. In maintenance mode they are what it runs (with GPU,
	// i915 loads only when BootExtensions has siderolabs/i915) and
	// reports (ExtensionStatus resources); Version is the image's version
	// (the Version resource). The installed node runs its installer
	// image's instead (Extensions).
	BootSchematic  string
	BootExtensions []string
	// Platform is the image's platform: "metal" (default) waits in
	// maintenance mode for its first config; "nocloud" first reads
	// UserData, the user-data of a cidata config drive (nil: no drive),
	// and installs from it without maintenance mode (platform.go).
	Platform string
	UserData []byte
	// Extensions returns the system extensions an installer image carries
	// (the Image Factory's view of its schematic); nil knows none.
	Extensions func(installImage string) []string
	// ControlPlane runs the node's Kubernetes after the bootstrap (and at
	// each boot of a bootstrapped node); its etcd's health is what
	// ServiceList reports. Nil: etcd is simulated (EtcdStartup).
	ControlPlane ControlPlane
	// OnBootstrap, if set, is called when a Bootstrap call bootstraps
	// etcd (not when it is refused): a record for tests that count
	// bootstraps (lab/home's events log). It runs under the node's lock
	// and must not call the node.
	OnBootstrap func()
	// OnMaintenanceApply, if set, is called when a maintenance-mode
	// ApplyConfiguration takes a first config (the one that crossed the
	// LAN), with its SHA-256; under the node's lock, as OnBootstrap.
	OnMaintenanceApply func(sha string)
}

// ControlPlane is what runs on a bootstrapped node (lab/kubecp).
type ControlPlane interface {
	// Start starts it for the running machine config, in the background,
	// with etcd's data in etcdDir. A second Start while it runs does
	// nothing.
	Start(cfg talosconfig.Config, etcdDir string)
	// EtcdHealthy reports whether etcd answers healthy.
	EtcdHealthy(ctx context.Context) bool
	// Stop stops it and waits; safe to call when not started.
	Stop()
}

// ApplyRecord is one entry of the node's apply history (for tests).
type ApplyRecord struct {
	Time          time.Time
	Mode          string // requested mode: AUTO, NO_REBOOT, REBOOT, STAGED, TRY; "REVERT" for a TRY rollback
	EffectiveMode string // mode the node answered with (AUTO resolves to NO_REBOOT or REBOOT)
	DryRun        bool
	ConfigHash    string // hex SHA-256 of the config bytes sent (or, for REVERT, of the config reverted to)
	Err           string // non-empty when the node rejected the request
}

// persistedState is what survives a restart of the lab node besides the
// config and the filesystem (etcd data dir, installed version).
type persistedState struct {
	Version       string `json:"version"`
	Bootstrapped  bool   `json:"bootstrapped"`
	StagedUpgrade string `json:"staged_upgrade,omitempty"`
	// set by the install from maintenance mode
	InstallImage string `json:"install_image,omitempty"`
	InstallDisk  string `json:"install_disk,omitempty"`
	// the installer image of the last install or upgrade: its schematic's
	// extensions are what the node runs
	Image string `json:"image,omitempty"`
	// the A/B boot partitions (abboot.go): the running one ("" is A),
	// the other one, and an upgrade written but not booted yet
	Partition string     `json:"partition,omitempty"`
	Previous  *bootEntry `json:"previous,omitempty"`
	Next      *bootEntry `json:"next,omitempty"`
}

type fault struct {
	err  error
	hang bool
}

// Node is one simulated Talos node serving the machine API over gRPC + mTLS.
type Node struct {
	opts Options

	bundle      *secrets.Bundle
	serverCert  tls.Certificate
	clientPEM   []byte // talosconfig client certificate (os:admin), PEM
	clientKey   []byte
	rootDir     string
	stateFile   string
	created     time.Time
	contextName string

	mu            sync.Mutex
	active        []byte // config the node runs now (may be a TRY config)
	state         persistedState
	rollback      *time.Timer
	rollbackTo    []byte
	tryGen        int
	unavailable   time.Time // API answers Unavailable until then
	rebootCancel  context.CancelFunc
	bootCtx       context.Context //nolint:containedctx // cancelled when the node "reboots"
	faults        map[string]fault
	applies       []ApplyRecord
	kmsg          []kmsgLine
	kmsgNotify    chan struct{}
	bootTime      time.Time
	etcdSince     time.Time // when etcd runs healthy after this boot's bootstrap
	stopped       bool
	listener      net.Listener
	server        *grpc.Server
	addr          string
	serveDone     chan struct{}
	rebootPending sync.WaitGroup

	maintenance bool // serving the maintenance API (no config yet)
	installing  bool // a config was accepted in maintenance mode
	// platformConfig: the hash of the config installed from a nocloud
	// config drive (platform.go).
	platformConfig string
	maintCert      tls.Certificate // self-signed maintenance certificate
	resources      state.State     // COSI resources: disks
	installed      chan struct{}   // closed when the installed node serves mTLS

	installFailures []string
	mounts          map[string]string // mount point under "/" -> host directory (virtiofs)

	fallBack  bool                // the next upgrade's boot fails (FallBackAtNextUpgrade)
	pulled    map[string]struct{} // images pulled into the system containerd since the boot
	upgrading bool                // a LifecycleService call runs the installer
}

var _ machine.MachineServiceServer = (*server)(nil)

// New prepares a node in opts.Dir: it loads Dir/secrets.yaml or generates a
// new bundle, loads the persisted machine config or generates the initial
// controlplane config, and issues the apid server certificate and an
// os:admin client certificate for the talosconfig.
func New(opts Options) (*Node, error) {
	if opts.Dir == "" {
		return nil, errors.New("talosnode: Options.Dir is required")
	}

	opts.setDefaults()

	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}

	opts.Dir = dir

	n := &Node{
		opts:        opts,
		rootDir:     filepath.Join(dir, "rootfs"),
		stateFile:   filepath.Join(dir, "node-state.json"),
		contextName: opts.ClusterName,
		faults:      map[string]fault{},
		kmsgNotify:  make(chan struct{}),
		created:     time.Now(),
		installed:   make(chan struct{}),
	}

	if len(n.opts.Disks) == 0 {
		n.opts.Disks = DefaultDisks
	}

	for _, d := range n.opts.Disks {
		if err = d.check(); err != nil {
			return nil, fmt.Errorf("talosnode: %w", err)
		}
	}

	if len(n.opts.NICs) == 0 {
		n.opts.NICs = defaultNICs(dir)
	}

	for _, c := range n.opts.NICs {
		if err = c.check(); err != nil {
			return nil, fmt.Errorf("talosnode: %w", err)
		}
	}

	if err = n.makeDirs(); err != nil {
		return nil, err
	}

	if err = n.loadOrCreateState(); err != nil {
		return nil, err
	}

	if _, statErr := os.Stat(n.persistedConfigPath()); opts.Maintenance && errors.Is(statErr, os.ErrNotExist) {
		// Nothing installed: it runs the image it booted, whatever an
		// earlier boot of another image recorded.
		n.state.Version = n.opts.Version

		return n, n.initMaintenance()
	}

	close(n.installed)

	if err = n.loadInstalled(); err != nil {
		return nil, err
	}

	n.boot("initial boot")

	return n, nil
}

// setDefaults fills the options left unset.
func (opts *Options) setDefaults() {
	if opts.Version == "" {
		opts.Version = DefaultVersion
	}

	if opts.KubernetesVersion == "" {
		opts.KubernetesVersion = KubernetesVersionOf(opts.Version)
	}

	if opts.Hostname == "" {
		opts.Hostname = DefaultHostname
	}

	if opts.ClusterName == "" {
		opts.ClusterName = DefaultClusterName
	}

	if opts.Endpoint == "" {
		opts.Endpoint = DefaultEndpoint
	}

	if opts.EtcdStartup == 0 {
		opts.EtcdStartup = DefaultEtcdStartup
	}
	if opts.RebootDuration <= 0 {
		opts.RebootDuration = DefaultRebootDuration
	}
}

// makeDirs makes the node's directory and its root file system.
func (n *Node) makeDirs() error {
	dirs := []string{n.opts.Dir, n.rootDir, filepath.Join(n.rootDir, filepath.Dir(ConfigPath))}
	if n.opts.Shares == nil { // a VM's shares say what /var/mnt holds, as on a node
		dirs = append(dirs, filepath.Join(n.rootDir, DataMount))
	}

	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}

	return nil
}

// loadInstalled loads what an installed node has: its disks' resources,
// its secrets, its config and certificates.
func (n *Node) loadInstalled() error {
	systemDisk := n.state.InstallDisk
	if _, ok := findDisk(n.opts.Disks, DefaultInstallDisk); systemDisk == "" && ok {
		systemDisk = DefaultInstallDisk // installed with the generated config
	}

	var err error
	if n.resources, err = newResources(n.opts.Disks, n.opts.NICs, systemDisk); err != nil {
		return err
	}

	if err = n.loadOrCreateSecrets(); err != nil {
		return err
	}

	if err = n.loadOrCreateConfig(); err != nil {
		return err
	}

	if n.state.InstallImage != "" {
		// installed from maintenance mode: the config's cluster
		if cfg, err := configloader.NewFromBytes(n.active); err == nil {
			n.useClusterName(cfg)
		}
	}

	if err = n.issueCertificates(); err != nil {
		return err
	}

	return nil
}

func (n *Node) loadOrCreateState() error {
	b, err := os.ReadFile(n.stateFile)

	switch {
	case errors.Is(err, os.ErrNotExist):
		n.state = persistedState{Version: n.opts.Version}

		return n.saveStateLocked()
	case err != nil:
		return err
	}

	if err = json.Unmarshal(b, &n.state); err != nil {
		return fmt.Errorf("talosnode: %s: %w", n.stateFile, err)
	}

	if n.state.Version == "" {
		n.state.Version = n.opts.Version
	}

	return nil
}

func (n *Node) saveStateLocked() error {
	b, err := json.MarshalIndent(n.state, "", "  ")
	if err != nil {
		return err
	}

	return writeFileAtomic(n.stateFile, b, 0o600)
}

func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}

	defer os.Remove(tmp.Name()) //nolint:errcheck

	if _, err = tmp.Write(b); err != nil {
		tmp.Close() //nolint:errcheck

		return err
	}

	if err = tmp.Chmod(mode); err != nil {
		tmp.Close() //nolint:errcheck

		return err
	}

	if err = tmp.Sync(); err != nil {
		tmp.Close() //nolint:errcheck

		return err
	}

	if err = tmp.Close(); err != nil {
		return err
	}

	return os.Rename(tmp.Name(), path)
}

// Start listens on addr (e.g. "127.0.0.1:0") and serves the machine API:
// with mTLS, after writing the talosconfig for the bound address, or the
// maintenance API when the node waits for its first config.
func (n *Node) Start(addr string) error {
	n.mu.Lock()
	if n.server != nil {
		n.mu.Unlock()

		return errors.New("talosnode: already started")
	}

	if n.maintenance && n.opts.Platform == "nocloud" {
		n.installFromPlatformLocked()
	}

	err := n.serveLocked(addr)
	maintenance := n.maintenance
	srv := n.server
	n.mu.Unlock()

	if err != nil {
		return err
	}

	if !maintenance {
		if err = n.writeTalosconfig(); err != nil {
			srv.Stop()

			return err
		}
	}

	if n.PlatformConfig() != "" {
		close(n.installed) // installed at this boot, from its config drive
	}

	return nil
}

// serveLocked listens on addr and serves the API of the node's mode.
func (n *Node) serveLocked(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}

	var srv *grpc.Server

	if n.maintenance {
		srv = grpc.NewServer(
			grpc.Creds(n.maintenanceCredentials()),
			grpc.MaxRecvMsgSize(constants.GRPCMaxMessageSize),
			grpc.ChainUnaryInterceptor(n.maintenanceUnaryInterceptor),
			grpc.ChainStreamInterceptor(n.maintenanceStreamInterceptor),
		)
		machine.RegisterMachineServiceServer(srv, &maintenanceServer{n: n})
	} else {
		srv = grpc.NewServer(
			grpc.Creds(n.transportCredentials()),
			grpc.MaxRecvMsgSize(constants.GRPCMaxMessageSize),
			grpc.ChainUnaryInterceptor(n.unaryInterceptor),
			grpc.ChainStreamInterceptor(n.streamInterceptor),
		)
		machine.RegisterMachineServiceServer(srv, &server{n: n})
		machine.RegisterImageServiceServer(srv, &imageServer{n: n})
		machine.RegisterLifecycleServiceServer(srv, &lifecycleServer{n: n})
	}

	cosiv1alpha1.RegisterStateServer(srv, cosiserver.NewState(state.Filter(n.resources, readOnly)))

	done := make(chan struct{})
	n.listener = lis
	n.server = srv
	n.addr = lis.Addr().String()
	n.serveDone = done

	go func() {
		defer close(done)

		srv.Serve(lis) //nolint:errcheck
	}()

	if n.maintenance {
		n.logfLocked(facilityUser, "info", "[talos] this machine is reachable at: %s", n.addr)
		n.logfLocked(facilityUser, "info", "[talos] maintenance mode: waiting for the machine configuration (talosctl apply-config --insecure)")
	} else {
		n.logfLocked(facilityUser, "info", "[talos] apid: listening on %s", n.addr)
	}

	return nil
}

// Addr is the address the node listens on (after Start).
func (n *Node) Addr() string {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.addr
}

// TalosconfigPath is Dir/talosconfig (written by Start).
func (n *Node) TalosconfigPath() string { return filepath.Join(n.opts.Dir, "talosconfig") }

// SecretsPath is Dir/secrets.yaml, the bundle the node's config was generated from.
func (n *Node) SecretsPath() string { return filepath.Join(n.opts.Dir, "secrets.yaml") }

// Root is the simulated node filesystem root: Read serves Root()+path.
func (n *Node) Root() string { return n.rootDir }

// Config returns the machine config the node runs now (a TRY config while
// a try is pending).
func (n *Node) Config() []byte {
	n.mu.Lock()
	defer n.mu.Unlock()

	return append([]byte(nil), n.active...)
}

// PersistedConfig returns the config stored on the node's disk
// (/system/state/config.yaml): what the node boots with next.
func (n *Node) PersistedConfig() []byte {
	b, _ := os.ReadFile(n.persistedConfigPath()) //nolint:errcheck

	return b
}

// Version is the Talos version the node reports now.
func (n *Node) Version() string {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.state.Version
}

// Bootstrapped reports whether etcd has been bootstrapped on the node.
func (n *Node) Bootstrapped() bool {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.state.Bootstrapped
}

// TryPending reports whether a TRY apply is waiting for its rollback.
func (n *Node) TryPending() bool {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.rollback != nil
}

// Fail makes the next calls of the RPC method (e.g. "ApplyConfiguration",
// "Version") fail with err until Reset. A plain error reaches the client as
// codes.Unknown; use status.Error for a specific code.
func (n *Node) Fail(method string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()

	n.faults[method] = fault{err: err}
}

// Hang makes calls of the RPC method block until their context ends.
func (n *Node) Hang(method string) {
	n.mu.Lock()
	defer n.mu.Unlock()

	n.faults[method] = fault{hang: true}
}

// Reset removes all injected faults.
func (n *Node) Reset() {
	n.mu.Lock()
	defer n.mu.Unlock()

	n.faults = map[string]fault{}
}

// Applies returns the apply history (oldest first).
func (n *Node) Applies() []ApplyRecord {
	n.mu.Lock()
	defer n.mu.Unlock()

	return append([]ApplyRecord(nil), n.applies...)
}

// Stop stops serving and cancels pending timers. The persisted config and
// state stay in Dir, so New+Start on the same Dir brings the node back
// (a pending TRY is lost, as on a real reboot).
func (n *Node) Stop() {
	n.mu.Lock()
	n.stopped = true

	if n.rollback != nil {
		n.rollback.Stop()
		n.rollback = nil
	}

	if n.rebootCancel != nil {
		n.rebootCancel()
	}

	srv := n.server
	done := n.serveDone
	n.mu.Unlock()

	if srv != nil {
		srv.Stop()
		<-done
	}

	n.rebootPending.Wait()

	if n.opts.ControlPlane != nil {
		n.opts.ControlPlane.Stop()
	}
}

func hashConfig(b []byte) string {
	sum := sha256.Sum256(b)

	return hex.EncodeToString(sum[:])
}
