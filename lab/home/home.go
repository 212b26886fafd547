package home

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homelab-migrate/migrate/lab/debroot"
	"github.com/homelab-migrate/migrate/lab/factory"
	"github.com/homelab-migrate/migrate/lab/incushost"
	"github.com/homelab-migrate/migrate/lab/labenv"
	"github.com/homelab-migrate/migrate/lab/talosnode"
	"github.com/homelab-migrate/migrate/lab/talosvm"
)

// FederationPath is what the example's http_check asks of matrix_url.
const FederationPath = "/_matrix/federation/v1/version"

// ClientVersionsPath is what Matrix clients ask first, and the example's
// health check of Synapse.
const ClientVersionsPath = "/_matrix/client/versions"

// Options configure a Home.
type Options struct {
	Dir string    // everything lives here; created when absent
	Log io.Writer // what the lab does (VM boots, the Kubernetes build); nil for none
	// AddressBlock is the Incus host's (incushost.Options): 0 gives the
	// instances 127.0.1.N; a lab beside another one takes another block.
	AddressBlock int
	// Env is added to Env and lab.env (KEY=VALUE): what the lab's user
	// needs beside the lab, e.g. the demo's MIGRATE_AGE_IDENTITY.
	Env []string
	// LANPhysical, when set, makes the host IncusOS after its
	// direct-attach tutorial: a managed network of type physical of this
	// name over the LAN bridge (incushost.Options.LANPhysical); named as
	// the bridge, it is all the host lists of the LAN.
	LANPhysical string
	// OldHost, if set, makes the old VMs Debian hosts (incushost.OldHost:
	// the variants); its Root, when empty, is lab/debroot's cached root,
	// built the first time (about a minute, as root). nil keeps the
	// busybox layout.
	OldHost *incushost.OldHost
}

// Home is a running lab home server.
type Home struct {
	dir   string
	extra []string
	logMu sync.Mutex
	log   io.Writer

	incus      *incushost.Server
	httpsAddr  string
	federation *http.Server
	fedURL     string
	failFed    atomic.Bool
	factory    *factory.Factory // the lab's Image Factory

	mu  sync.Mutex
	vms map[string]*talosvm.VM

	events *events // Dir/EventsFile
	router *router // the LAN's DHCP server
	// dataDir holds the data volume's files.
	dataDir string
	// oldHost is the Debian old VMs' variant; nil: the busybox layout.
	oldHost *incushost.OldHost
}

// The lab host's names, IncusOS's (examples/homelab's defaults).
const (
	StoragePool = "local" // IncusOS's own ZFS pool
	DataPool    = "tank"  // the pool on the data disks
	DataVolume  = "data"  // its custom volume shared into the node
)

// Start assembles the lab in o.Dir and serves it until Close; bad
// Options.Env lines are refused.
func Start(ctx context.Context, o Options) (*Home, error) {
	if o.Dir == "" {
		return nil, errors.New("lab: Options.Dir is empty")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	h := &Home{dir: dir, extra: o.Env, log: o.Log, vms: map[string]*talosvm.VM{}}
	if h.log == nil {
		h.log = io.Discard
	}
	// Its socket runs commands in the old VMs: the lab's user's only.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	if h.router, err = newRouter(o.AddressBlock, dir); err != nil {
		return nil, err
	}
	for _, d := range []string{"incus", "images"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("lab: %w", err)
		}
	}
	if h.events, err = openEvents(dir); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	oldHost, err := h.debianRoot(ctx, o.OldHost)
	if err != nil {
		h.events.close()
		return nil, err
	}
	h.oldHost = oldHost
	// As IncusOS: its own pool "local", a pool on the data disks, the
	// NAT bridge incusbr0 and a bridge of its own to the LAN.
	h.incus, err = incushost.New(incushost.Options{Dir: filepath.Join(dir, "incus"), Seed: true, OldHost: oldHost, BootVM: h.bootVM, Logf: h.logf,
		Pools: []string{StoragePool, DataPool}, Network: "incusbr0", Hardware: &Hardware,
		AddressBlock: o.AddressBlock, LAN: lanBridge, LANPhysical: o.LANPhysical, LANLease: h.router.lease,
		OnExec: func(instance string, command []string) {
			h.events.add(Event{Kind: EventExec, Instance: instance, Command: command})
		}})
	if err != nil {
		h.events.close()
		return nil, fmt.Errorf("lab: %w", err)
	}
	// The data volume: the photos, files and recordings (the apps'
	// hostPaths are its directories); the old VMs' exports land here.
	if h.dataDir, err = h.incus.FilesystemVolume(DataPool, DataVolume); err != nil {
		h.Close()
		return nil, fmt.Errorf("lab: %w", err)
	}
	for _, d := range []string{"media/movies", "files", "photos", "frigate"} { // media/movies: Jellyfin's library
		if err := os.MkdirAll(filepath.Join(h.dataDir, d), 0o755); err != nil {
			h.Close()
			return nil, fmt.Errorf("lab: %w", err)
		}
	}
	if err := h.serve(ctx); err != nil {
		h.Close()
		return nil, err
	}
	if err := labenv.Write(dir, h.httpsAddr, h.Env()); err != nil {
		h.Close()
		return nil, fmt.Errorf("lab: %w", err)
	}
	return h, nil
}

// debianRoot fills in the Debian root of a Debian old host.
// Its Samba users' passwords, when not given, are the lab directory's
// (sambaPasswords).
func (h *Home) debianRoot(ctx context.Context, o *incushost.OldHost) (*incushost.OldHost, error) {
	if o == nil {
		return nil, nil
	}
	host := *o
	if host.SambaPasswords == nil {
		pw, err := h.sambaPasswords()
		if err != nil {
			return nil, err
		}
		host.SambaPasswords = pw
	}
	if host.Root != "" {
		return &host, nil
	}
	root, err := debroot.Root(ctx, h.logf)
	if err != nil {
		return nil, fmt.Errorf("lab: the old VMs' Debian root: %w", err)
	}
	host.Root = root
	return &host, nil
}

func (h *Home) serve(ctx context.Context) error {
	// HTTPS only, as IncusOS: no shell, so no unix socket either.
	addr, err := h.incus.ServeHTTPS("127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	h.httpsAddr = addr.String()
	if err := os.WriteFile(filepath.Join(h.dir, "incus", "server.crt"), h.incus.CertPEM(), 0o644); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	// What `incus remote add lab ...` would have made, trusted already.
	if err := h.incus.WriteClientConfig(labenv.ClientConfig(h.dir), Remote, "https://"+h.httpsAddr); err != nil {
		return fmt.Errorf("lab: %w", err)
	}

	// The Image Factory the talos provider fetches the ISO from. It adds
	// an owner to the schematics it stores, as a factory may: its IDs are
	// not the plain computation, and the provider must take its answer.
	if h.factory, err = factory.Start("127.0.0.1:0", factory.Options{Owner: FactoryOwner}); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	// As the public factory, it knows the brief's schematic already
	// (someone registered it before): a plan can tell the ISO's size.
	if _, err = h.factory.Register([]byte("customization:\n  systemExtensions:\n    officialExtensions: [siderolabs/i915]\n")); err != nil {
		return fmt.Errorf("lab: %w", err)
	}

	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("lab: federation endpoint: %w", err)
	}
	// TLS only, from a CA of its own, as the homeserver behind the
	// ingress: a client must be told to trust it (matrix_ca). The
	// endpoint forwards to the node's ingress (portforward.go), which
	// serves the same certificate (the example's synapse-tls Secret).
	cfg, err := h.matrixTLS(net.IPv4(127, 0, 0, 1))
	if err != nil {
		l.Close()
		return fmt.Errorf("lab: federation endpoint: %w", err)
	}
	// It verifies the ingress's certificate as a client told matrix_ca does.
	ca := x509.NewCertPool()
	if caPEM, err := os.ReadFile(h.MatrixCA()); err != nil || !ca.AppendCertsFromPEM(caPEM) {
		l.Close()
		return fmt.Errorf("lab: federation endpoint: no certificate in the Matrix CA %s (%v)", h.MatrixCA(), err)
	}
	// A client that refuses the certificate is not news: its handshake
	// errors stay out of the lab's log.
	h.federation = &http.Server{Handler: h.matrixEndpoint(ca), ReadHeaderTimeout: 10 * time.Second, TLSConfig: cfg, ErrorLog: log.New(io.Discard, "", 0)}
	h.fedURL = "https://" + l.Addr().String()
	go h.federation.ServeTLS(l, "", "")
	return nil
}

func (h *Home) logf(format string, args ...any) {
	h.logMu.Lock()
	defer h.logMu.Unlock()
	fmt.Fprintf(h.log, strings.TrimSuffix(format, "\n")+"\n", args...)
}

// bootVM is the Incus host's BootVM: the VM becomes a lab Talos node on
// the address the host gave it.
func (h *Home) bootVM(ctx context.Context, spec incushost.VMSpec) (incushost.Guest, error) {
	if spec.IPv4 == "" {
		// On the LAN without a lease: it runs, and nobody can reach it.
		h.logf("lab: %s boots on the LAN without an address (the router leased it none)", spec.Name)
		return unreachable{}, nil
	}
	vm, err := talosvm.Boot(ctx, talosvm.Spec{
		Name: spec.Name,
		Addr: spec.IPv4,
		Dir:  spec.Dir, // deleted with the instance

		Disks:   disks(spec.Disks),
		DataDir: spec.DataShare,
		GPU:     spec.GPU,
		NICs:    nics(spec.NICs),
		// As Incus sizes a VM: 1 CPU and 1GiB unless its limits say.
		CPU:      cpuCount(spec.Config["limits.cpu"]),
		Memory:   strings.TrimSuffix(cmp.Or(spec.Config["limits.memory"], "1GiB"), "B"),
		ISO:      spec.ISO,
		UserData: userData(spec.ConfigDrive),
		Factory:  h.factory.Extensions,
		Log:      h.logf,

		OnBootstrap: func() { h.events.add(Event{Kind: EventBootstrap, Instance: spec.Name}) },
		OnPodRun: func(namespace, pod, job string) {
			h.events.add(Event{Kind: EventPod, Instance: spec.Name, Namespace: namespace, Job: job, Pod: pod})
		},
	})
	var noMedium *talosvm.NoBootableMediumError
	if errors.As(err, &noMedium) {
		// As on a host: the VM runs, its firmware finds nothing to boot.
		h.logf("lab: %s console: %v", spec.Name, err)
		return unreachable{}, nil
	}
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.vms[spec.Name] = vm
	h.mu.Unlock()
	return guest{h, spec.Name, vm}, nil
}

// userData is the user-data of a VM's config drive; nil without one.
func userData(drive map[string]string) []byte {
	if drive == nil {
		return nil
	}
	return []byte(drive["user-data"])
}

// cpuCount is the number of CPUs of limits.cpu: a count ("6"), or the
// CPUs it pins ("0-3,6"); Incus gives a VM 1 when unset.
func cpuCount(limit string) string {
	if limit == "" {
		return "1"
	}
	if !strings.ContainsAny(limit, "-,") {
		return limit
	}
	n := 0
	for _, part := range strings.Split(limit, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, errA := strconv.Atoi(strings.TrimSpace(lo))
		b, errB := strconv.Atoi(strings.TrimSpace(hi))
		switch {
		case isRange && errA == nil && errB == nil && b >= a:
			n += b - a + 1
		case !isRange && errA == nil:
			n++
		}
	}
	return strconv.Itoa(max(n, 1))
}

// unreachable is a VM that booted where nothing can reach it.
type unreachable struct{}

func (unreachable) Stop() error { return nil }

type guest struct {
	h    *Home
	name string
	vm   *talosvm.VM
}

func (g guest) Stop() error {
	g.vm.Stop()
	g.h.mu.Lock()
	if g.h.vms[g.name] == g.vm {
		delete(g.h.vms, g.name)
	}
	g.h.mu.Unlock()
	return nil
}

// disks are what the node sees of the VM's disk devices, as on Incus:
// SCSI disks named sda, sdb... (the root disk first), serial
// incus_<device>, and the ISO as a read-only CD-ROM. Shared directories
// are virtiofs, not disks.
func disks(devs []incushost.Disk) []talosnode.Disk {
	devs = append([]incushost.Disk(nil), devs...)
	sort.SliceStable(devs, func(i, j int) bool { return devs[i].Path == "/" && devs[j].Path != "/" })
	var out []talosnode.Disk
	sd, sr := 0, 0
	for _, d := range devs {
		switch {
		case d.Shared:
		case d.ISO:
			if d.Size > 0 { // an empty file: no medium
				out = append(out, talosnode.Disk{Name: fmt.Sprintf("/dev/sr%d", sr), Size: fmt.Sprint(d.Size),
					Model: "QEMU CD-ROM", Serial: "incus_" + d.Device, Transport: "scsi", Readonly: true, CDROM: true})
				sr++
			}
		default:
			size := "10GiB" // Incus's default root size
			if d.Size > 0 {
				size = fmt.Sprint(d.Size)
			}
			out = append(out, talosnode.Disk{Name: "/dev/sd" + string(rune('a'+sd)), Size: size,
				Model: "QEMU HARDDISK", Serial: "incus_" + d.Device, Transport: "scsi"})
			sd++
		}
	}
	return out
}

// Hardware is the brief's machine as its /1.0/resources reports it: 8
// CPU threads and 32GiB, the Intel iGPU at 0000:00:02.0 (i915, the one
// examples/homelab passes through: igpu_pci), the NVMe disk of IncusOS
// and its pool "local", and the two disks of the "tank" ZFS mirror.
var Hardware = incushost.Hardware{
	CPUs: 8, Memory: 32 << 30,
	GPUs: []incushost.GPU{{PCIAddress: "0000:00:02.0", Driver: "i915", DriverVersion: "6.12.20", Vendor: "Intel Corporation", VendorID: "8086",
		Product: "Alder Lake-P GT1 [UHD Graphics]", ProductID: "46a3", Card: "card0", Render: "renderD128"}},
	Disks: []incushost.HostDisk{
		{ID: "nvme0n1", Model: "Samsung SSD 980 1TB", Type: "nvme", Serial: "S649NL0T000001", Size: 1000204886016, PCIAddress: "0000:01:00.0"},
		{ID: "sda", Model: "WDC WD40EFRX-68N32N0", Type: "sata", Serial: "WD-WCC7K0000001", Size: 4000787030016, PCIAddress: "0000:00:17.0"},
		{ID: "sdb", Model: "WDC WD40EFRX-68N32N0", Type: "sata", Serial: "WD-WCC7K0000002", Size: 4000787030016, PCIAddress: "0000:00:17.0"},
	},
	// local: what IncusOS leaves of the NVMe disk; tank: the mirror.
	PoolSizes: map[string]int64{StoragePool: 900 << 30, DataPool: 3600 << 30},
}

// Dir is the lab's directory.
func (h *Home) Dir() string { return h.dir }

// ClientConfig is the INCUS_CONF directory whose default remote, Remote,
// is the lab's Incus host (a trusted client certificate, its server
// certificate pinned).
func (h *Home) ClientConfig() string { return labenv.ClientConfig(h.dir) }

// Remote is the incus CLI remote that names the lab's Incus host in
// ClientConfig (the example's incus_remote).
const Remote = "lab"

// HTTPSAddr is the Incus host's HTTPS address; its certificate is
// Dir/incus/server.crt.
func (h *Home) HTTPSAddr() string { return h.httpsAddr }

// Incus is the lab's Incus host.
func (h *Home) Incus() *incushost.Server { return h.incus }

// DataDir holds the files of the host's data volume (DataPool/DataVolume,
// the example's data_pool and data_volume).
func (h *Home) DataDir() string { return h.dataDir }

// DataDirIn is DataDir of the lab in dir, for a test that runs the lab as
// a process of its own (migrate-lab serve).
func DataDirIn(dir string) string {
	return incushost.VolumeDir(filepath.Join(dir, "incus"), DataPool, DataVolume)
}

// FactoryOwner is the owner the lab's Image Factory adds to every
// schematic it stores (factory.Options.Owner).
const FactoryOwner = "homelab"

// Factory is the lab's Image Factory (the example's image_factory is its URL).
func (h *Home) Factory() *factory.Factory { return h.factory }

// ImagesDir is where the demo keeps the ISO talos_image downloads (the
// example's talos_iso_dir).
func (h *Home) ImagesDir() string { return filepath.Join(h.dir, "images") }

// WriteISO registers the schematic of official extensions with the lab's
// factory and writes its ISO of that Talos version under ImagesDir, as a
// user who fetched it by hand would have it; its path.
func (h *Home) WriteISO(version string, extensions ...string) (string, error) {
	var s factory.Schematic
	s.Customization.SystemExtensions.OfficialExtensions = extensions
	y, err := s.Marshal()
	if err != nil {
		return "", err
	}
	id, err := h.factory.Register(y)
	if err != nil {
		return "", err
	}
	s, _ = h.factory.Lookup(id) // as the factory stores it: with its owner
	b, err := factory.EncodeISO(version, "amd64", s)
	if err != nil {
		return "", err
	}
	p := filepath.Join(h.ImagesDir(), fmt.Sprintf("talos-%s-%s.iso", version, id[:12]))
	return p, os.WriteFile(p, b, 0o644)
}

// MatrixURL is the federation endpoint's base URL, https:// (the
// example's matrix_url); its certificate chains to MatrixCA.
func (h *Home) MatrixURL() string { return h.fedURL }

// FailFederation makes the federation endpoint answer 503 (true) or 200.
func (h *Home) FailFederation(fail bool) { h.failFed.Store(fail) }

// VM is the running Talos VM of that name, nil when none runs.
func (h *Home) VM(name string) *talosvm.VM {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.vms[name]
}

// Env is what a shell exports to drive examples/homelab against the lab:
// INCUS_CONF (the incus CLI's configuration, and so the incus provider's,
// with the lab as remote "lab"), and the example's variables that name
// the remote, the nodes' addresses on the LAN, the Image Factory (and the
// directory the ISO is downloaded to), the homeserver's URL and its CA,
// the apps as the old VMs run them (siteVars), the old Samba account the
// example's smb_check logs in as, with its password (sensitive in the
// runbook; sambaCheckVars); then Options.Env. The example's defaults of the
// pools, the LAN bridge and the MACs are the lab's.
func (h *Home) Env() []string {
	return append([]string{
		"INCUS_CONF=" + h.ClientConfig(),
		"MIGRATE_VAR_incus_remote=" + Remote,
		"MIGRATE_VAR_node_address=" + h.NodeAddress(),
		"MIGRATE_VAR_rehearsal_address=" + h.RehearsalAddress(),
		"MIGRATE_VAR_image_factory=" + h.factory.URL(),
		"MIGRATE_VAR_talos_iso_dir=" + h.ImagesDir(),
		"MIGRATE_VAR_matrix_url=" + h.fedURL,
		"MIGRATE_VAR_matrix_ca=" + h.MatrixCA(),
		"MIGRATE_VAR_matrix_tls_cert=" + h.MatrixTLSCert(),
		"MIGRATE_VAR_matrix_tls_key=" + h.MatrixTLSKey(),
	}, slices.Concat(h.siteVars(), h.sambaCheckVars(), h.extra)...)
}

// siteVars are what migrate init reads of the old VMs and writes into
// site.auto.hcl (the apps as installed, their images never older), for a
// runbook run without it: the demo, the tests, a user's lab.env.
func (h *Home) siteVars() []string {
	o := h.oldHost
	if o == nil {
		// The busybox layout has no Docker: its systemctl stand-in
		// plays a frigate unit.
		return []string{"MIGRATE_VAR_frigate_install=service"}
	}
	synapse := cmp.Or(o.SynapseVersion, incushost.DefaultSynapseVersion)
	jellyfin := cmp.Or(o.JellyfinVersion, incushost.DefaultJellyfinVersion)
	frigate := cmp.Or(o.FrigateVersion, incushost.DefaultFrigateVersion)
	hwaccel := map[bool][2]string{false: {"none", ""}, true: {"vaapi", "preset-vaapi"}}[o.HWAccel]
	frigateInstall := map[bool]string{false: "compose", true: "service"}[o.FrigateService]
	return []string{
		"MIGRATE_VAR_synapse_database=" + cmp.Or(o.SynapseDB, "sqlite3"),
		"MIGRATE_VAR_synapse_version=" + synapse + "+bookworm1",
		"MIGRATE_VAR_synapse_image=matrixdotorg/synapse:v" + synapse,
		"MIGRATE_VAR_jellyfin_version=" + jellyfin + "+deb12",
		"MIGRATE_VAR_jellyfin_image=jellyfin/jellyfin:" + jellyfin,
		"MIGRATE_VAR_frigate_version=" + frigate,
		"MIGRATE_VAR_frigate_image=ghcr.io/blakeblackshear/frigate:" + frigate,
		"MIGRATE_VAR_frigate_install=" + frigateInstall,
		"MIGRATE_VAR_jellyfin_hwaccel=" + hwaccel[0],
		"MIGRATE_VAR_frigate_hwaccel=" + hwaccel[1],
	}
}

// Close stops the Talos VMs (and their Kubernetes), then the Incus host
// (the old VMs' inits) and the federation endpoint, and removes lab.env.
// The directory stays: Start on it again finds the VMs as they were (a
// Talos VM stopped).
func (h *Home) Close() error {
	labenv.Remove(h.dir)
	h.mu.Lock()
	vms := h.vms
	h.vms = map[string]*talosvm.VM{}
	h.mu.Unlock()
	for _, vm := range vms {
		vm.Stop()
	}
	err := h.incus.Close()
	if h.federation != nil {
		h.federation.Close()
	}
	if h.factory != nil {
		h.factory.Close()
	}
	h.events.close()
	return err
}

// nics are the VM's NICs as its node's links: the guest's name, the MAC.
func nics(in []incushost.NIC) []talosnode.NIC {
	var out []talosnode.NIC
	for _, n := range in {
		out = append(out, talosnode.NIC{Name: n.Name, MAC: n.MAC})
	}
	return out
}
