package inventory

import "github.com/homelab-migrate/migrate/providers/incus/incusapi"

// GPUCard is a GPU of the host, as /1.0/resources says.
type GPUCard = incusapi.GPUCard

// Host is what Read saw of an Incus host.
type Host struct {
	Target      string          `json:"target"` // where it was read: a socket or a URL
	Server      Server          `json:"server"`
	Instances   []Instance      `json:"instances"`
	Pools       []Pool          `json:"pools"`
	Networks    []Network       `json:"networks"`
	GPUs        []GPUCard       `json:"gpus"`
	Disks       []incusapi.Disk `json:"disks"`
	CPUs        int             `json:"cpus"`         // CPU threads
	Memory      int64           `json:"memory"`       // bytes
	DefaultPool string          `json:"default_pool"` // the default profile's root disk pool
}

// Server names the daemon.
type Server struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	OS      string `json:"os,omitempty"`
}

// Agent states of an instance: whether exec and the files API reach
// inside it.
const (
	AgentContainer = "container" // a container: the daemon reaches in itself
	AgentRunning   = "running"   // a running VM whose incus-agent answers
	AgentAbsent    = "absent"    // a running VM whose agent does not answer
	AgentUnknown   = "unknown"   // a stopped VM: nothing tells until it runs
)

// Instance is one instance of the host.
type Instance struct {
	Name        string                       `json:"name"`
	Type        string                       `json:"type"` // "virtual-machine" or "container"
	Status      string                       `json:"status"`
	Description string                       `json:"description,omitempty"`
	Profiles    []string                     `json:"profiles"`
	Config      map[string]string            `json:"config"`  // expanded; only the keys the move needs (shownKeys: never cloud-init, environment or user keys, which may hold secrets)
	Devices     map[string]map[string]string `json:"devices"` // expanded (its profiles' too)
	Autostart   bool                         `json:"autostart"`
	Snapshots   []Snapshot                   `json:"snapshots"`
	Agent       string                       `json:"agent"`
	// FilesError is why the files API could not be read ("" when it was).
	FilesError string `json:"files_error,omitempty"`
	RootPool   string `json:"root_pool,omitempty"`
	RootUsage  int64  `json:"root_usage,omitempty"` // bytes, when the daemon says
	// Apps are the move's applications found inside it, by their files.
	Apps []App `json:"apps,omitempty"`
}

// VM reports whether the instance is a virtual machine.
func (i *Instance) VM() bool { return i.Type == "virtual-machine" }

// Running reports whether the instance runs.
func (i *Instance) Running() bool { return i.Status == "Running" }

// GPUDevices are the names of its gpu devices, sorted.
func (i *Instance) GPUDevices() []string {
	var out []string
	for _, n := range sortedKeys(i.Devices) {
		if i.Devices[n]["type"] == "gpu" {
			out = append(out, n)
		}
	}
	return out
}

// Snapshot is one snapshot of an instance; Size in bytes (0 when the
// daemon does not say).
type Snapshot struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
}

// App is an application found in an instance, with the file that showed
// it and, for a video application, the hardware decoding it is set for.
type App struct {
	Name     string `json:"name"`
	Role     string `json:"role"`
	Evidence string `json:"evidence"`          // the path that showed it
	HWAccel  string `json:"hwaccel,omitempty"` // e.g. "vaapi (/etc/jellyfin/encoding.xml)"
	// Detail holds what its files say that the runbook uses (Synapse:
	// server_name, public_baseurl).
	Detail map[string]string `json:"detail,omitempty"`
	// Facts are how it is installed, read inside the VM.
	Facts *AppFacts `json:"facts,omitempty"`
}

// Pool is a storage pool with its space and custom volumes.
type Pool struct {
	Name   string `json:"name"`
	Driver string `json:"driver"`
	Status string `json:"status,omitempty"` // the daemon's: "Created", "Unavailable", ...
	Total  int64  `json:"total"`            // bytes; 0 when unknown
	Used   int64  `json:"used"`
	// SpaceError is why its space could not be read ("" when it was): an
	// unavailable pool's resources fail, and the rest of the host still
	// reads.
	SpaceError string   `json:"space_error,omitempty"`
	Volumes    []Volume `json:"volumes"`
}

// Free is the pool's free space in bytes.
func (p *Pool) Free() int64 { return max(p.Total-p.Used, 0) }

// Volume is a custom storage volume.
type Volume struct {
	Pool        string   `json:"pool"`
	Name        string   `json:"name"`
	ContentType string   `json:"content_type"` // "filesystem", "block", "iso"
	Size        string   `json:"size,omitempty"`
	UsedBy      []string `json:"used_by,omitempty"` // instance names
}

// Network is a network of the host, managed by Incus or not.
type Network struct {
	Name    string   `json:"name"`
	Type    string   `json:"type"`
	Managed bool     `json:"managed"`
	NAT     bool     `json:"nat"`
	DHCP    bool     `json:"dhcp"`
	Address string   `json:"address,omitempty"` // a managed network's ipv4.address
	Parent  string   `json:"parent,omitempty"`  // a physical or macvlan network's interface
	UsedBy  []string `json:"used_by,omitempty"` // instance names
}

// Instance returns the instance of that name, nil when the host has none.
func (h *Host) Instance(name string) *Instance {
	for i := range h.Instances {
		if h.Instances[i].Name == name {
			return &h.Instances[i]
		}
	}
	return nil
}

// Pool returns the pool of that name, nil when the host has none.
func (h *Host) Pool(name string) *Pool {
	for i := range h.Pools {
		if h.Pools[i].Name == name {
			return &h.Pools[i]
		}
	}
	return nil
}

// Volume returns the custom volume pool/name, nil when absent.
func (h *Host) Volume(pool, name string) *Volume {
	p := h.Pool(pool)
	if p == nil {
		return nil
	}
	for i := range p.Volumes {
		if p.Volumes[i].Name == name {
			return &p.Volumes[i]
		}
	}
	return nil
}
