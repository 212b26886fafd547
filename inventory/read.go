package inventory

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// Roles of the old VMs in the runbook (examples/homelab's variables).
const (
	RoleServices = "services" // Samba, Jellyfin, Frigate: var.services_vm
	RoleMatrix   = "matrix"   // Synapse: var.matrix_vm
	RoleK3s      = "k3s"      // the k3s playground: var.k3s_vm
)

// Roles are the roles in the runbook's order.
var Roles = []string{RoleServices, RoleMatrix, RoleK3s}

// appProbes are the files that show an application in an old VM, where
// its Debian package (or its Compose project) keeps them.
var appProbes = []struct {
	app, role, path, hwaccelFile string
}{
	{"Jellyfin", RoleServices, "/etc/jellyfin", "/etc/jellyfin/encoding.xml"},
	{"Frigate", RoleServices, "/opt/frigate/config/config.yml", "/opt/frigate/config/config.yml"},
	{"Samba", RoleServices, "/etc/samba/smb.conf", ""},
	{"Synapse", RoleMatrix, "/etc/matrix-synapse/homeserver.yaml", ""},
	{"k3s", RoleK3s, "/etc/rancher/k3s/k3s.yaml", ""},
}

// Read reads the host c speaks to: only GET and HEAD requests, so that
// nothing on the host changes. An unreachable host, a certificate that
// is not the pinned one and a client the host does not trust are the
// client's own errors (incusapi's UnreachableError, ServerCertError,
// UntrustedError), each saying what to do.
func Read(ctx context.Context, c *incusapi.Client) (*Host, error) {
	srv, err := c.Server(ctx)
	if err != nil {
		return nil, err
	}
	h := &Host{Target: c.Target(), Server: Server{
		Name: srv.Environment.ServerName, Version: srv.Environment.ServerVersion,
		OS: strings.TrimSpace(srv.Environment.OSName + " " + srv.Environment.OSVersion)}}

	if res, err := c.Resources(ctx); err != nil {
		return nil, fmt.Errorf("reading the host's hardware (/1.0/resources): %w", err)
	} else {
		h.GPUs, h.Disks = res.GPU.Cards, res.Storage.Disks
		h.CPUs, h.Memory = res.CPU.Total, res.Memory.Total
	}
	if p, err := c.Profile(ctx, "default"); err == nil {
		h.DefaultPool = p.RootPool()
	} else if !incusapi.IsNotFound(err) {
		return nil, fmt.Errorf("reading the default profile: %w", err)
	}
	if err := readPools(ctx, c, h); err != nil {
		return nil, err
	}
	nets, err := c.Networks(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the networks: %w", err)
	}
	for _, n := range nets {
		h.Networks = append(h.Networks, Network{Name: n.Name, Type: n.Type, Managed: n.Managed,
			// A managed bridge NATs and serves DHCP unless told not to.
			NAT:     n.Managed && n.Type == "bridge" && n.Config["ipv4.nat"] != "false" && n.Config["ipv4.address"] != "none",
			DHCP:    n.Managed && n.Type == "bridge" && n.Config["ipv4.dhcp"] != "false" && n.Config["ipv4.address"] != "none",
			Address: n.Config["ipv4.address"], Parent: n.Config["parent"], UsedBy: instanceNames(n.UsedBy)})
	}
	list, err := c.Instances(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the instances: %w", err)
	}
	slices.SortFunc(list, func(a, b incusapi.Instance) int { return strings.Compare(a.Name, b.Name) })
	for _, in := range list {
		i, err := readInstance(ctx, c, in)
		if incusapi.IsNotFound(err) {
			continue // deleted since the listing: not a part of the move
		}
		if err != nil {
			return nil, err
		}
		h.Instances = append(h.Instances, *i)
	}
	return h, nil
}

func readPools(ctx context.Context, c *incusapi.Client, h *Host) error {
	pools, err := c.StoragePoolsAll(ctx)
	if err != nil {
		return fmt.Errorf("reading the storage pools: %w", err)
	}
	for _, p := range pools {
		pool := Pool{Name: p.Name, Driver: p.Driver, Status: p.Status}
		if r, err := c.StoragePoolResources(ctx, p.Name); err == nil {
			pool.Total, pool.Used = r.Space.Total, r.Space.Used
		} else if ctx.Err() != nil {
			return err
		} else {
			// A pool whose disks are gone answers 500 here (even "Storage
			// pool not found"): a finding, not the end of the read.
			pool.SpaceError = err.Error()
		}
		vols, err := c.StorageVolumesAll(ctx, p.Name)
		if err != nil {
			return fmt.Errorf("reading the volumes of pool %s: %w", p.Name, err)
		}
		for _, v := range vols {
			pool.Volumes = append(pool.Volumes, Volume{Pool: p.Name, Name: v.Name, ContentType: v.ContentType,
				Size: v.Config["size"], UsedBy: instanceNames(v.UsedBy)})
		}
		h.Pools = append(h.Pools, pool)
	}
	return nil
}

// readInstance completes what the listing said of an instance (its
// expanded config and devices come with recursion=1) with its snapshots,
// its state and what runs in it.
func readInstance(ctx context.Context, c *incusapi.Client, in incusapi.Instance) (*Instance, error) {
	name := in.Name
	cfg := in.ExpandedConfig
	if cfg == nil {
		cfg = in.Config
	}
	devs := in.ExpandedDevices
	if devs == nil {
		devs = in.Devices
	}
	i := &Instance{Name: in.Name, Type: in.Type, Status: in.Status, Description: in.Description,
		Profiles: in.Profiles, Config: map[string]string{}, Devices: devs}
	for k, v := range cfg {
		if shownKey(k) {
			i.Config[k] = v
		}
	}
	i.Autostart = cfg["boot.autostart"] == "true" || cfg["boot.autostart"] == "1"
	for _, d := range devs {
		if d["type"] == "disk" && d["path"] == "/" {
			i.RootPool = d["pool"]
		}
	}
	snaps, err := c.Snapshots(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("reading the snapshots of %s: %w", name, err)
	}
	for _, s := range snaps {
		i.Snapshots = append(i.Snapshots, Snapshot{Name: s.Name, Size: s.Size})
	}
	switch {
	case !i.VM():
		i.Agent = AgentContainer
	case !i.Running():
		i.Agent = AgentUnknown
	}
	if i.Running() {
		st, err := c.InstanceState(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("reading the state of %s: %w", name, err)
		}
		if d, ok := st.Disk["root"]; ok {
			i.RootUsage = d.Usage
		}
		if i.VM() {
			// The daemon reports -1 processes when a VM's agent does
			// not answer: it only knows what QEMU tells it.
			i.Agent = AgentRunning
			if st.Processes < 0 {
				i.Agent = AgentAbsent
			}
		}
	}
	if i.Agent == AgentContainer || i.Agent == AgentRunning {
		probeApps(ctx, c, i)
	}
	return i, nil
}

// shownKeys are the config keys the report keeps: what the move needs to
// know. Others may hold secrets (cloud-init.user-data, environment.*,
// user.*) and are never copied out of the host.
var shownKeys = []string{"limits.", "boot.", "security.", "snapshots.", "migration.", "image.os", "image.release", "image.description"}

func shownKey(k string) bool {
	for _, p := range shownKeys {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// probeApps looks for the move's applications through the files API
// (HEAD and GET: what `incus file pull` reads).
func probeApps(ctx context.Context, c *incusapi.Client, i *Instance) {
	v := vm{ctx, c, i.Name}
	for _, p := range appProbes {
		evidence := p.path
		if _, err := c.StatFile(ctx, i.Name, p.path); err != nil {
			if !incusapi.IsNotFound(err) {
				i.FilesError = err.Error()
				if i.VM() {
					i.Agent = AgentAbsent
				}
				return
			}
			// Frigate's Compose project may live anywhere: Compose knows.
			if evidence = ""; p.app == "Frigate" {
				evidence = frigateComposeFile(v)
			}
			if evidence == "" {
				continue
			}
		}
		app := App{Name: p.app, Role: p.role, Evidence: evidence}
		if p.hwaccelFile != "" {
			if accel := hwaccel(ctx, c, i.Name, p.hwaccelFile); accel != "" {
				app.HWAccel = accel + " (" + p.hwaccelFile + ")"
			}
		}
		app.Facts = readFacts(v, &app)
		if f := app.Facts; app.HWAccel == "" && f != nil && f.HWAccel != "" && len(f.ConfigFiles) > 0 {
			app.HWAccel = f.HWAccel + " (" + f.ConfigFiles[len(f.ConfigFiles)-1] + ")"
		}
		i.Apps = append(i.Apps, app)
	}
}

// readFacts reads how an application is installed (nil for one whose
// install the move does not depend on: k3s).
func readFacts(v vm, app *App) *AppFacts {
	var f AppFacts
	switch app.Name {
	case "Jellyfin":
		f = jellyfinFacts(v)
	case "Synapse":
		f, app.Detail = synapseFacts(v)
	case "Frigate":
		f = frigateFacts(v)
	case "Samba":
		f = sambaFacts(v)
	default:
		return nil
	}
	return &f
}

// readFile reads up to 256 KiB of a file inside an instance; nil when it
// cannot.
func readFile(ctx context.Context, c *incusapi.Client, instance, file string) []byte {
	fi, r, _, err := c.GetFile(ctx, instance, file)
	if err != nil || r == nil {
		return nil
	}
	defer r.Close()
	if fi.Type != "file" {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(r, 256<<10))
	if err != nil {
		return nil
	}
	return b
}

var (
	jellyfinAccel = regexp.MustCompile(`<HardwareAccelerationType>\s*([A-Za-z0-9_]+)\s*</HardwareAccelerationType>`)
	frigateAccel  = regexp.MustCompile(`(?m)^\s*hwaccel_args:\s*(\S+)`)
)

// hwaccel is the hardware decoding an application's file sets ("" when
// none): Jellyfin's HardwareAccelerationType, Frigate's hwaccel_args.
func hwaccel(ctx context.Context, c *incusapi.Client, instance, file string) string {
	b := readFile(ctx, c, instance, file)
	for _, re := range []*regexp.Regexp{jellyfinAccel, frigateAccel} {
		if m := re.FindSubmatch(b); m != nil && !strings.EqualFold(string(m[1]), "none") {
			return string(m[1])
		}
	}
	return ""
}

// instanceNames are the instances among a used_by list of URLs.
func instanceNames(usedBy []string) []string {
	var out []string
	for _, u := range usedBy {
		p := u
		if i := strings.IndexByte(p, '?'); i >= 0 {
			p = p[:i]
		}
		if strings.HasPrefix(p, "/1.0/instances/") && strings.Count(p, "/") == 3 {
			if n, err := url.PathUnescape(path.Base(p)); err == nil {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
