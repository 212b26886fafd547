package incusapi

import (
	"encoding/json"
	"slices"
	"time"
)

// Server is GET /1.0.
type Server struct {
	Auth          string         `json:"auth"` // "trusted" or "untrusted"
	AuthMethods   []string       `json:"auth_methods,omitempty"`
	APIExtensions []string       `json:"api_extensions,omitempty"`
	APIStatus     string         `json:"api_status,omitempty"`
	APIVersion    string         `json:"api_version,omitempty"`
	Public        bool           `json:"public"`
	Config        map[string]any `json:"config,omitempty"`
	Environment   ServerEnv      `json:"environment"`
}

// HasExtension reports whether the server announces an API extension.
func (s *Server) HasExtension(name string) bool { return slices.Contains(s.APIExtensions, name) }

// ServerEnv is the "environment" of GET /1.0 (only filled for trusted clients).
type ServerEnv struct {
	Addresses              []string `json:"addresses,omitempty"`
	Architectures          []string `json:"architectures,omitempty"`
	Certificate            string   `json:"certificate,omitempty"`
	CertificateFingerprint string   `json:"certificate_fingerprint,omitempty"`
	Driver                 string   `json:"driver,omitempty"`
	DriverVersion          string   `json:"driver_version,omitempty"`
	Firewall               string   `json:"firewall,omitempty"`
	Kernel                 string   `json:"kernel,omitempty"`
	KernelArchitecture     string   `json:"kernel_architecture,omitempty"`
	KernelVersion          string   `json:"kernel_version,omitempty"`
	OSName                 string   `json:"os_name,omitempty"`
	OSVersion              string   `json:"os_version,omitempty"`
	Project                string   `json:"project,omitempty"`
	Server                 string   `json:"server,omitempty"`
	ServerClustered        bool     `json:"server_clustered"`
	ServerName             string   `json:"server_name,omitempty"`
	ServerPid              int      `json:"server_pid,omitempty"`
	ServerVersion          string   `json:"server_version,omitempty"`
	Storage                string   `json:"storage,omitempty"`
	StorageVersion         string   `json:"storage_version,omitempty"`
}

// InstancePut is the writable part of an instance: the body of
// PUT /1.0/instances/{name}. PUT replaces the whole object: start from a GET.
type InstancePut struct {
	Architecture string                       `json:"architecture,omitempty"`
	Config       map[string]string            `json:"config"`
	Devices      map[string]map[string]string `json:"devices"`
	Ephemeral    bool                         `json:"ephemeral"`
	Profiles     []string                     `json:"profiles"` // nil: the server's default ("default" on create)
	Stateful     bool                         `json:"stateful"`
	Description  string                       `json:"description"`
}

// Instance is GET /1.0/instances/{name}.
type Instance struct {
	Name         string                       `json:"name"`
	Type         string                       `json:"type"` // "container" or "virtual-machine"
	Status       string                       `json:"status"`
	StatusCode   int                          `json:"status_code"`
	Description  string                       `json:"description"`
	Architecture string                       `json:"architecture"`
	Config       map[string]string            `json:"config"`
	Devices      map[string]map[string]string `json:"devices"`
	Profiles     []string                     `json:"profiles"`
	Ephemeral    bool                         `json:"ephemeral"`
	Stateful     bool                         `json:"stateful"`

	ExpandedConfig  map[string]string            `json:"expanded_config,omitempty"`
	ExpandedDevices map[string]map[string]string `json:"expanded_devices,omitempty"`

	CreatedAt  time.Time `json:"created_at"`
	LastUsedAt time.Time `json:"last_used_at"`
	Location   string    `json:"location,omitempty"`
	Project    string    `json:"project,omitempty"`
}

// Put returns the writable part of the instance, ready to modify and send
// back with UpdateInstance.
func (i *Instance) Put() InstancePut {
	return InstancePut{
		Architecture: i.Architecture,
		Config:       i.Config,
		Devices:      i.Devices,
		Ephemeral:    i.Ephemeral,
		Profiles:     i.Profiles,
		Stateful:     i.Stateful,
		Description:  i.Description,
	}
}

// InstanceSource says where a new instance's root disk comes from.
type InstanceSource struct {
	Type        string `json:"type"` // "image" or "none" (empty disk)
	Alias       string `json:"alias,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	Server      string `json:"server,omitempty"`
	Protocol    string `json:"protocol,omitempty"` // "incus", "simplestreams", "oci"
	Certificate string `json:"certificate,omitempty"`
	Secret      string `json:"secret,omitempty"`
	ImageType   string `json:"image_type,omitempty"`
}

// InstancesPost is the body of POST /1.0/instances.
type InstancesPost struct {
	InstancePut
	Name         string         `json:"name"`
	Type         string         `json:"type,omitempty"` // default "container"
	Source       InstanceSource `json:"source"`
	InstanceType string         `json:"instance_type,omitempty"`
	Start        bool           `json:"start,omitempty"`
}

// InstanceState is GET /1.0/instances/{name}/state.
type InstanceState struct {
	Status     string                          `json:"status"`
	StatusCode int                             `json:"status_code"`
	Pid        int64                           `json:"pid"`
	Processes  int64                           `json:"processes"`
	CPU        InstanceStateCPU                `json:"cpu"`
	Memory     InstanceStateMemory             `json:"memory"`
	Network    map[string]InstanceStateNetwork `json:"network,omitempty"`
	Disk       map[string]InstanceStateDisk    `json:"disk,omitempty"`
}

// InstanceStateCPU is the CPU usage in nanoseconds.
type InstanceStateCPU struct {
	Usage int64 `json:"usage"`
}

// InstanceStateMemory is the memory usage in bytes.
type InstanceStateMemory struct {
	Usage     int64 `json:"usage"`
	UsagePeak int64 `json:"usage_peak"`
	Total     int64 `json:"total"`
	SwapUsage int64 `json:"swap_usage"`
}

// InstanceStateDisk is a disk's usage in bytes.
type InstanceStateDisk struct {
	Usage int64 `json:"usage"`
	Total int64 `json:"total"`
}

// InstanceStateNetwork is one network interface of a running instance.
type InstanceStateNetwork struct {
	Addresses []InstanceStateAddress `json:"addresses"`
	Hwaddr    string                 `json:"hwaddr"`
	HostName  string                 `json:"host_name"`
	Mtu       int                    `json:"mtu"`
	State     string                 `json:"state"`
	Type      string                 `json:"type"`
}

// InstanceStateAddress is one address of an interface.
type InstanceStateAddress struct {
	Family  string `json:"family"`
	Address string `json:"address"`
	Netmask string `json:"netmask"`
	Scope   string `json:"scope"`
}

// InstanceStatePut is the body of PUT /1.0/instances/{name}/state.
//
// Timeout is in seconds. Unlike the raw API (where 0 means "no grace: stop
// now"), Timeout 0 here means "the daemon's default" (wait for the guest,
// capped at 600 s by the daemon); use Force for an immediate stop.
type InstanceStatePut struct {
	Action   string `json:"action"` // start, stop, restart, freeze, unfreeze
	Timeout  int    `json:"timeout"`
	Force    bool   `json:"force"`
	Stateful bool   `json:"stateful"`
}

// Snapshot is one of GET /1.0/instances/{name}/snapshots?recursion=1.
type Snapshot struct {
	Name            string                       `json:"name"`
	CreatedAt       time.Time                    `json:"created_at"`
	ExpiresAt       time.Time                    `json:"expires_at"`
	LastUsedAt      time.Time                    `json:"last_used_at"`
	Stateful        bool                         `json:"stateful"`
	Architecture    string                       `json:"architecture"`
	Config          map[string]string            `json:"config"`
	Devices         map[string]map[string]string `json:"devices"`
	Ephemeral       bool                         `json:"ephemeral"`
	Profiles        []string                     `json:"profiles"`
	ExpandedConfig  map[string]string            `json:"expanded_config,omitempty"`
	ExpandedDevices map[string]map[string]string `json:"expanded_devices,omitempty"`
	Size            int64                        `json:"size"`
}

// Operation is a background operation (GET /1.0/operations/{id}).
type Operation struct {
	ID          string              `json:"id"`
	Class       string              `json:"class"`
	Description string              `json:"description"`
	CreatedAt   time.Time           `json:"created_at"`
	UpdatedAt   time.Time           `json:"updated_at"`
	Status      string              `json:"status"` // Pending, Running, Success, Failure, Cancelled
	StatusCode  int                 `json:"status_code"`
	Resources   map[string][]string `json:"resources,omitempty"`
	Metadata    map[string]any      `json:"metadata,omitempty"`
	MayCancel   bool                `json:"may_cancel"`
	Err         string              `json:"err"`
	Location    string              `json:"location,omitempty"`
}

// response is the envelope of every answer.
type response struct {
	Type       string          `json:"type"` // sync, async, error
	Status     string          `json:"status"`
	StatusCode int             `json:"status_code"`
	Operation  string          `json:"operation"`
	ErrorCode  int             `json:"error_code"`
	Error      string          `json:"error"`
	Metadata   json.RawMessage `json:"metadata"`
}

type certificatesPost struct {
	Name        string   `json:"name"`
	Type        string   `json:"type"`
	Certificate string   `json:"certificate"` // base64 of the DER bytes
	Restricted  bool     `json:"restricted"`
	Projects    []string `json:"projects"`
}

type snapshotsPost struct {
	Name     string `json:"name"`
	Stateful bool   `json:"stateful"`
}

type instanceRestore struct {
	Restore  string `json:"restore"`
	Stateful bool   `json:"stateful"`
}
