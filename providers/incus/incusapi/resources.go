package incusapi

import (
	"context"
	"net/url"
	"slices"
	"strings"
)

// Resources is GET /1.0/resources: the host's hardware (the part migrate
// reads: its GPUs and disks, its memory and CPU count).
type Resources struct {
	CPU     ResourcesCPU     `json:"cpu"`
	Memory  ResourcesMemory  `json:"memory"`
	GPU     ResourcesGPU     `json:"gpu"`
	Storage ResourcesStorage `json:"storage"`
}

// ResourcesCPU counts the host's CPU threads.
type ResourcesCPU struct {
	Architecture string `json:"architecture"`
	Total        int    `json:"total"`
}

// ResourcesMemory is the host's memory in bytes.
type ResourcesMemory struct {
	Used  int64 `json:"used"`
	Total int64 `json:"total"`
}

// ResourcesGPU lists the host's GPUs.
type ResourcesGPU struct {
	Cards []GPUCard `json:"cards"`
	Total int       `json:"total"`
}

// GPUCard is one GPU of the host, as the daemon sees it on the PCI bus.
// Driver is the kernel driver bound to it ("i915", "amdgpu", "nvidia",
// "vfio-pci" when already set aside for passthrough, "" when none).
type GPUCard struct {
	Driver        string  `json:"driver"`
	DriverVersion string  `json:"driver_version"`
	PCIAddress    string  `json:"pci_address"`
	Vendor        string  `json:"vendor"`
	VendorID      string  `json:"vendor_id"`
	Product       string  `json:"product"`
	ProductID     string  `json:"product_id"`
	NUMANode      int     `json:"numa_node"`
	DRM           *GPUDRM `json:"drm,omitempty"`
}

// GPUDRM is the card's DRM side, present while a host driver drives it.
type GPUDRM struct {
	ID           int    `json:"id"`
	CardName     string `json:"card_name"`
	CardDevice   string `json:"card_device"`
	RenderName   string `json:"render_name,omitempty"`
	RenderDevice string `json:"render_device,omitempty"`
}

// ResourcesStorage lists the host's disks.
type ResourcesStorage struct {
	Disks []Disk `json:"disks"`
	Total int    `json:"total"`
}

// Disk is one disk of the host; Size is in bytes.
type Disk struct {
	ID         string `json:"id"`
	Device     string `json:"device"`
	Model      string `json:"model,omitempty"`
	Type       string `json:"type"` // "nvme", "sata", "scsi", "virtio", ...
	ReadOnly   bool   `json:"read_only"`
	Size       int64  `json:"size"`
	Removable  bool   `json:"removable"`
	Serial     string `json:"serial,omitempty"`
	DevicePath string `json:"device_path,omitempty"`
	PCIAddress string `json:"pci_address,omitempty"`
}

// Resources reads the host's hardware.
func (c *Client) Resources(ctx context.Context) (*Resources, error) {
	var r Resources
	if _, err := c.get(ctx, "/1.0/resources", nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// PoolResources is GET /1.0/storage-pools/{name}/resources: the pool's
// space, in bytes.
type PoolResources struct {
	Space struct {
		Used  int64 `json:"used"`
		Total int64 `json:"total"`
	} `json:"space"`
}

// Free is the pool's free space in bytes.
func (r *PoolResources) Free() int64 { return max(r.Space.Total-r.Space.Used, 0) }

// StoragePoolResources reads a pool's used and total space.
func (c *Client) StoragePoolResources(ctx context.Context, pool string) (*PoolResources, error) {
	var r PoolResources
	if _, err := c.get(ctx, "/1.0/storage-pools/"+url.PathEscape(pool)+"/resources", nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// StorageVolumesAll lists a pool's custom volumes with their config and
// users (GET /1.0/storage-pools/{pool}/volumes/custom?recursion=1), sorted
// by name.
func (c *Client) StorageVolumesAll(ctx context.Context, pool string) ([]StorageVolume, error) {
	var list []StorageVolume
	if _, err := c.get(ctx, volumesPath(pool), url.Values{"recursion": {"1"}}, &list); err != nil {
		return nil, err
	}
	slices.SortFunc(list, func(a, b StorageVolume) int { return strings.Compare(a.Name, b.Name) })
	return list, nil
}

// Profiles lists the project's profiles (GET /1.0/profiles?recursion=1),
// sorted by name.
func (c *Client) Profiles(ctx context.Context) ([]Profile, error) {
	var list []Profile
	if _, err := c.get(ctx, "/1.0/profiles", url.Values{"recursion": {"1"}}, &list); err != nil {
		return nil, err
	}
	slices.SortFunc(list, func(a, b Profile) int { return strings.Compare(a.Name, b.Name) })
	return list, nil
}
