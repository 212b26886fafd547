package talosvm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/homelab-migrate/migrate/lab/factory"
	"github.com/homelab-migrate/migrate/lab/kubecp"
	"github.com/homelab-migrate/migrate/lab/talosnode"
	"github.com/homelab-migrate/migrate/providers/talos"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
)

// APIPort is the Talos machine API's port.
const APIPort = 50000

// DataTag is the virtiofs tag of the VM's `data` disk device.
const DataTag = "incus_data"

// Spec is a VM booted from the Talos ISO.
type Spec struct {
	Name    string           // the VM's name: the node's hostname until its config names one
	Addr    string           // IPv4 in 127.0.0.0/8: machine API on :50000, Kubernetes on :6443
	Dir     string           // working directory (node/, kube/)
	Disks   []talosnode.Disk // from the VM's disk devices
	DataDir string           // host directory of the `data` virtiofs device; "" when none
	GPU     bool             // a `gpu` device is attached
	// CPU and Memory are the VM's size as Kubernetes quantities (its
	// limits.cpu and limits.memory): the node's capacity (kubecp.Config).
	CPU, Memory string
	// NICs are the VM's network interfaces with their MACs (its nic
	// devices: hwaddr, else volatile.<dev>.hwaddr): the links the node
	// reports (talosctl get links). None: the node's default eth0.
	NICs []talosnode.NIC
	// Schematics adds schematic ID -> official extensions to
	// KnownSchematics (a schematic the lab's Image Factory knows).
	Schematics map[string][]string
	// ISO is the file the VM boots from (lab/factory's format): the node
	// runs its Talos version and, in maintenance mode, its schematic's
	// extensions. A file that is no lab ISO (an empty placeholder) does
	// not boot: Boot returns a NoBootableMediumError. "" boots the
	// default image (talosnode.DefaultVersion, no extensions).
	ISO string
	// UserData is the user-data of the VM's config drive (an Incus disk
	// with source cloud-init:config); nil without one. A VM booted from a
	// nocloud ISO installs from it (talosnode.Options.Platform); a metal
	// ISO does not look for it.
	UserData []byte
	// Factory looks up schematics registered with the lab's Image
	// Factory (lab/factory's Extensions), for the installer image of the
	// node's config; nil: only KnownSchematics and Schematics.
	Factory func(schematicID string) ([]string, bool)
	// RebootDuration of the node (talosnode.Options); 0 for its default.
	RebootDuration time.Duration
	Log            func(format string, args ...any) // the lab's log; nil for none
	// OnBootstrap and OnPodRun, if set, are told of each bootstrap of the
	// node's etcd and each Job pod its Kubernetes runs
	// (talosnode.Options.OnBootstrap, kubecp.Config.OnPodRun).
	OnBootstrap func()
	OnPodRun    func(namespace, pod, job string)
}

// KnownSchematics are the schematics of official extensions the lab knows
// by ID: the brief's (i915) and i915 with intel-ucode.
func KnownSchematics() map[string][]string {
	m := map[string][]string{}
	for _, ext := range [][]string{
		{"siderolabs/i915"},
		{"siderolabs/i915", "siderolabs/intel-ucode"},
		{"siderolabs/intel-ucode", "siderolabs/i915"},
	} {
		m[talos.ExtensionsSchematicID(ext...)] = ext
	}

	return m
}

// VM is a booted Talos VM.
type VM struct {
	spec Spec
	node *talosnode.Node
	kube *kube
}

// Endpoint is the Kubernetes endpoint of a VM at addr, for its machine
// config (cluster.controlPlane.endpoint).
func Endpoint(addr string) string { return fmt.Sprintf("https://%s:%d", addr, kubecp.APIPort) }

// Boot starts the VM's node in maintenance mode (or installed, when Dir
// holds an installed node).
func Boot(_ context.Context, spec Spec) (*VM, error) {
	ip := net.ParseIP(spec.Addr).To4()
	if ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("talosvm: VM %q: Addr %q must be an IPv4 address in 127.0.0.0/8", spec.Name, spec.Addr)
	}

	if spec.Dir == "" || spec.Name == "" {
		return nil, fmt.Errorf("talosvm: VM %q: Name and Dir are required", spec.Name)
	}

	if spec.Log == nil {
		spec.Log = func(string, ...any) {}
	}

	schematics := KnownSchematics()
	for id, ext := range spec.Schematics {
		schematics[id] = ext
	}
	installed := func(image string) []string {
		id := schematicID(image)
		if ext, ok := schematics[id]; ok {
			return ext
		}
		if spec.Factory != nil {
			ext, _ := spec.Factory(id)
			return ext
		}
		return nil
	}

	var iso factory.ISO
	if spec.ISO != "" {
		var err error
		if iso, err = factory.ReadISO(spec.ISO); err != nil {
			return nil, &NoBootableMediumError{VM: spec.Name, ISO: spec.ISO, Err: err}
		}
	}

	shares := map[string]string{}
	if spec.DataDir != "" {
		if fi, err := os.Stat(spec.DataDir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("talosvm: VM %q: data directory %s is not a directory", spec.Name, spec.DataDir)
		}

		shares[DataTag] = spec.DataDir
	}

	k := &kube{spec: spec}
	node, err := talosnode.New(talosnode.Options{
		Dir:            filepath.Join(spec.Dir, "node"),
		Hostname:       spec.Name,
		Endpoint:       Endpoint(spec.Addr),
		Addresses:      []string{spec.Addr},
		Maintenance:    true,
		Disks:          spec.Disks,
		NICs:           spec.NICs,
		Shares:         shares,
		GPU:            spec.GPU,
		Version:        iso.Version,
		BootSchematic:  iso.SchematicID,
		BootExtensions: iso.Extensions(),
		Platform:       iso.Platform,
		UserData:       spec.UserData,
		Extensions:     installed,
		ControlPlane:   k,
		RebootDuration: spec.RebootDuration,
		OnBootstrap:    spec.OnBootstrap,
		OnMaintenanceApply: func(sha string) {
			spec.Log("talosvm: VM %s: first machine config (sha256 %s) taken over the LAN by the maintenance API (ApplyConfiguration)", spec.Name, sha)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("talosvm: VM %q: %w", spec.Name, err)
	}

	k.hostPath = node.HostPath // the node's paths, for its pods' hostPath volumes

	if err = node.Start(net.JoinHostPort(spec.Addr, fmt.Sprint(APIPort))); err != nil {
		node.Stop()

		return nil, fmt.Errorf("talosvm: VM %q: %w", spec.Name, err)
	}

	if spec.ISO != "" {
		spec.Log("talosvm: VM %s booted Talos %s (schematic %s) from %s: machine API on %s", spec.Name, node.Version(), iso.SchematicID, spec.ISO, node.Addr())
	} else {
		spec.Log("talosvm: VM %s booted from the Talos ISO: machine API on %s", spec.Name, node.Addr())
	}
	if sha := node.PlatformConfig(); sha != "" {
		spec.Log("talosvm: VM %s installed from its config drive (nocloud, cidata/user-data, machine config sha256 %s), without maintenance mode", spec.Name, sha)
	}

	return &VM{spec: spec, node: node, kube: k}, nil
}

// NoBootableMediumError: the VM's ISO holds no Talos image. On a real
// host the VM starts and its firmware finds nothing to boot (OVMF's
// "BdsDxe: No bootable option or device was found."): nothing answers at
// its address.
type NoBootableMediumError struct {
	VM, ISO string
	Err     error
}

func (e *NoBootableMediumError) Error() string {
	return fmt.Sprintf("talosvm: VM %q: BdsDxe: No bootable option or device was found (%s: %v)", e.VM, e.ISO, e.Err)
}

func (e *NoBootableMediumError) Unwrap() error { return e.Err }

// schematicID is the schematic of an Image Factory installer image
// (<host>/<kind>-installer/<id>:<tag>), "" for another image.
func schematicID(image string) string {
	ref, _, _ := strings.Cut(image, "@")
	ref, _, _ = strings.Cut(ref[strings.LastIndex(ref, "/")+1:], ":")

	if i := strings.LastIndex(image, "/"); i < 0 || !strings.HasSuffix(image[:i], "installer") {
		return ""
	}

	return ref
}

// Addr is the machine API's address (Addr:50000).
func (v *VM) Addr() string { return v.node.Addr() }

// Spec is what the VM was booted with: Boot(ctx, vm.Spec()) after Stop
// starts it again from its disk.
func (v *VM) Spec() Spec { return v.spec }

// Node is the lab Talos node the VM runs.
func (v *VM) Node() *talosnode.Node { return v.node }

// WaitKubernetes waits until the Kubernetes started by the bootstrap runs
// (API ready, kwok started) and returns the error that stopped it if any;
// it returns at once when nothing was started.
func (v *VM) WaitKubernetes(ctx context.Context) error { return v.kube.wait(ctx) }

// KubernetesPIDs are the process ids of the node's running Kubernetes
// components by name (empty before the bootstrap and after Stop).
func (v *VM) KubernetesPIDs() map[string]int {
	v.kube.mu.Lock()
	defer v.kube.mu.Unlock()

	if v.kube.cp == nil {
		return map[string]int{}
	}

	return v.kube.cp.PIDs()
}

// Stop stops the node and its Kubernetes (kwok, scheduler, controller
// manager, API server, etcd). Its Dir stays: Boot on it again boots the
// installed node.
func (v *VM) Stop() { v.node.Stop() }

// kube is the node's talosnode.ControlPlane: kubecp, started in the
// background (the Bootstrap RPC answers at once, as on a node).
type kube struct {
	spec     Spec
	hostPath func(string) (string, error)

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	cp     *kubecp.ControlPlane
	err    error
}

func (k *kube) Start(cfg talosconfig.Config, etcdDir string) {
	k.mu.Lock()
	defer k.mu.Unlock()

	if k.done != nil {
		return
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	k.cancel, k.done, k.err = cancel, done, nil

	go func() {
		defer close(done)

		cp, err := k.start(ctx, cfg, etcdDir)
		if err != nil && ctx.Err() == nil {
			k.spec.Log("talosvm: VM %s: Kubernetes did not start: %v", k.spec.Name, err)
		}

		k.mu.Lock()
		k.cp, k.err = cp, err
		k.mu.Unlock()
	}()
}

func (k *kube) start(ctx context.Context, cfg talosconfig.Config, etcdDir string) (*kubecp.ControlPlane, error) {
	// The K8s* accessors read Talos 1.13's v1alpha1 cluster section and
	// 1.14's multi-document Kubernetes config alike.
	caCfg, sa := cfg.K8sAPIServerCAConfig(), cfg.K8sServiceAccountConfig()
	if caCfg == nil || caCfg.IssuingCA() == nil || sa == nil || sa.IssuingKey() == nil {
		return nil, errors.New("the machine config has no cluster section")
	}

	secretbox, aescbc := kubecp.EncryptionKeys(cfg) // Secrets at rest, in 1.13's config or 1.14's

	bin, err := kubecp.Binaries(ctx, k.spec.Log)
	if err != nil {
		return nil, err
	}

	start := time.Now()

	cp, err := kubecp.Start(ctx, kubecp.Config{
		Dir:               filepath.Join(k.spec.Dir, "kube"),
		EtcdDir:           etcdDir,
		Addr:              k.spec.Addr,
		NodeName:          hostname(cfg, k.spec.Name),
		Bin:               bin,
		CA:                caCfg.IssuingCA(),
		ServiceAccountKey: sa.IssuingKey().Key,
		SecretboxKey:      secretbox,
		AESCBCKey:         aescbc,
		HostPath:          k.hostPath,
		Log:               k.spec.Log,
		OnPodRun:          k.spec.OnPodRun,
		Taints:            nodeTaints(cfg),
		CPU:               k.spec.CPU,
		Memory:            k.spec.Memory,
		Labels:            nodeLabels(cfg),
	})
	if err == nil {
		k.spec.Log("talosvm: VM %s: Kubernetes API ready on %s after %s", k.spec.Name, Endpoint(k.spec.Addr), time.Since(start).Round(time.Second))
	}

	return cp, err
}

// nodeTaints are the taints Talos gives its node: a control plane is
// tainted node-role.kubernetes.io/control-plane:NoSchedule unless
// cluster.allowSchedulingOnControlPlanes (1.13), or as its KubeNodeConfig
// document says (1.14, where config generation writes that taint), then
// the node's own taints (KEY: VALUE:EFFECT, or KEY: EFFECT).
func nodeTaints(cfg talosconfig.Config) []kubecp.Taint {
	node := cfg.K8sNodeConfig()
	if node == nil {
		return nil
	}

	taints := node.Taints()

	var out []kubecp.Taint

	for _, key := range slices.Sorted(maps.Keys(taints)) {
		v := taints[key]
		value, effect := "", v
		if i := strings.LastIndex(v, ":"); i >= 0 {
			value, effect = v[:i], v[i+1:]
		}
		out = append(out, kubecp.Taint{Key: key, Value: value, Effect: effect})
	}
	return out
}

// nodeLabels are the labels the node registers with: machine.nodeLabels
// (1.13) or the KubeNodeConfig document's (1.14), with the control-plane
// role label.
func nodeLabels(cfg talosconfig.Config) map[string]string {
	if node := cfg.K8sNodeConfig(); node != nil {
		return node.Labels()
	}

	return nil
}

// hostname is the node's hostname by its config: a HostnameConfig
// document, else machine.network.hostname, else the VM's name.
func hostname(cfg talosconfig.Config, fallback string) string {
	if h := cfg.NetworkHostnameConfig(); h != nil && h.Hostname() != "" {
		return h.Hostname()
	}

	return fallback
}

func (k *kube) wait(ctx context.Context) error {
	k.mu.Lock()
	done := k.done
	k.mu.Unlock()

	if done == nil {
		return nil
	}

	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
	}

	k.mu.Lock()
	defer k.mu.Unlock()

	return k.err
}

func (k *kube) EtcdHealthy(ctx context.Context) bool {
	k.mu.Lock()
	started := k.done != nil
	k.mu.Unlock()

	return started && kubecp.EtcdHealthy(ctx, k.spec.Addr)
}

func (k *kube) Stop() {
	k.mu.Lock()
	cancel, done := k.cancel, k.done
	k.mu.Unlock()

	if done == nil {
		return
	}

	cancel()
	<-done

	k.mu.Lock()
	cp := k.cp
	k.cp, k.done = nil, nil
	k.mu.Unlock()

	if cp != nil {
		cp.Stop()
	}
}
