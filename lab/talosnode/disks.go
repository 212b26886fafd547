package talosnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/dustin/go-humanize"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"
)

// Disk is one disk of the simulated machine, as given on the command line
// (--disk name=/dev/sdb,size=150GiB,model=QEMU HARDDISK) or in a disks file.
type Disk struct {
	Name       string `yaml:"name"` // device path, e.g. /dev/sda; the resource ID is its base name
	Size       string `yaml:"size"` // e.g. 32GiB, 150GB, 1073741824
	Model      string `yaml:"model,omitempty"`
	Serial     string `yaml:"serial,omitempty"`
	WWID       string `yaml:"wwid,omitempty"`
	Transport  string `yaml:"transport,omitempty"` // virtio, scsi, nvme, usb, ...
	Readonly   bool   `yaml:"readonly,omitempty"`
	CDROM      bool   `yaml:"cdrom,omitempty"`
	Rotational bool   `yaml:"rotational,omitempty"`
}

// DefaultDisks is the machine's disks when none are given: one system disk.
var DefaultDisks = []Disk{{Name: DefaultInstallDisk, Size: "10GiB", Model: "QEMU HARDDISK", Transport: "scsi"}}

// ParseDisk parses the --disk flag form: comma-separated key=value pairs
// with the keys of Disk's YAML names (name and size are required).
func ParseDisk(s string) (Disk, error) {
	var d Disk

	for field := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(field, "=")
		if !ok {
			return d, fmt.Errorf("disk %q: %q is not key=value", s, field)
		}

		var err error

		switch strings.TrimSpace(k) {
		case "name":
			d.Name = v
		case "size":
			d.Size = v
		case "model":
			d.Model = v
		case "serial":
			d.Serial = v
		case "wwid":
			d.WWID = v
		case "transport":
			d.Transport = v
		case "readonly":
			d.Readonly, err = strconv.ParseBool(v)
		case "cdrom":
			d.CDROM, err = strconv.ParseBool(v)
		case "rotational":
			d.Rotational, err = strconv.ParseBool(v)
		default:
			return d, fmt.Errorf("disk %q: unknown key %q", s, k)
		}

		if err != nil {
			return d, fmt.Errorf("disk %q: %s: %w", s, k, err)
		}
	}

	return d, d.check()
}

// LoadDisks reads a YAML list of disks (the keys of Disk).
func LoadDisks(file string) ([]Disk, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}

	var disks []Disk
	if err = yaml.Unmarshal(b, &disks); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}

	for _, d := range disks {
		if err = d.check(); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
	}

	return disks, nil
}

func (d Disk) check() error {
	if !strings.HasPrefix(d.Name, "/dev/") || d.ID() == "" {
		return fmt.Errorf("disk name %q must be a device path like /dev/sda", d.Name)
	}

	if _, err := d.bytes(); err != nil {
		return fmt.Errorf("disk %s: size %q: %w", d.Name, d.Size, err)
	}

	return nil
}

// ID is the block.Disk resource ID: the device's base name (sda).
func (d Disk) ID() string { return strings.TrimPrefix(path.Clean(d.Name), "/dev/") }

func (d Disk) bytes() (uint64, error) {
	if d.Size == "" {
		return 0, errors.New("size is required")
	}

	return humanize.ParseBytes(d.Size)
}

func (d Disk) resource() *block.Disk {
	size, _ := d.bytes() //nolint:errcheck // checked when the disk was given

	r := block.NewDisk(block.NamespaceName, d.ID())
	spec := r.TypedSpec()
	spec.DevPath = d.Name
	spec.SetSize(size)
	spec.IOSize = 512
	spec.SectorSize = 512
	spec.Readonly = d.Readonly
	spec.CDROM = d.CDROM
	spec.Model = d.Model
	spec.Serial = d.Serial
	spec.WWID = d.WWID
	spec.Transport = d.Transport
	spec.Rotational = d.Rotational
	spec.SubSystem = "/sys/class/block"

	return r
}

// newResources is the node's COSI state: the resource definitions talosctl
// resolves "disks" and "links" with, one block.Disk per disk,
// block.SystemDisk once installed (systemDisk != ""), and the links of
// lo and the NICs (links.go).
func newResources(disks []Disk, nics []NIC, systemDisk string) (state.State, error) {
	st := state.WrapCore(namespaced.NewState(inmem.Build))
	ctx := context.Background()

	for _, def := range []meta.ResourceDefinitionSpec{block.DiskExtension{}.ResourceDefinition(), block.SystemDiskExtension{}.ResourceDefinition()} {
		rd, err := meta.NewResourceDefinition(def)
		if err != nil {
			return nil, err
		}

		if err = st.Create(ctx, rd); err != nil {
			return nil, err
		}
	}

	for _, d := range disks {
		if err := st.Create(ctx, d.resource(), state.WithCreateOwner("block.DisksController")); err != nil {
			return nil, fmt.Errorf("disk %s: %w", d.Name, err)
		}
	}

	if err := addLinks(st, nics); err != nil {
		return nil, err
	}

	if systemDisk != "" {
		if err := setSystemDisk(st, disks, systemDisk); err != nil {
			return nil, err
		}
	}

	return st, nil
}

// setSystemDisk records the disk Talos was installed to.
func setSystemDisk(st state.State, disks []Disk, devPath string) error {
	d, ok := findDisk(disks, devPath)
	if !ok {
		return fmt.Errorf("system disk %s is not one of the node's disks", devPath)
	}

	r := block.NewSystemDisk(block.NamespaceName, block.SystemDiskID)
	r.TypedSpec().DiskID = d.ID()
	r.TypedSpec().DevPath = d.Name

	return st.Create(context.Background(), r, state.WithCreateOwner("block.SystemDiskController"))
}

func findDisk(disks []Disk, devPath string) (Disk, bool) {
	for _, d := range disks {
		if path.Clean(d.Name) == path.Clean(devPath) {
			return d, true
		}
	}

	return Disk{}, false
}

// readOnly is the access policy of the resource API: clients read, only
// the node writes.
func readOnly(_ context.Context, access state.Access) error {
	if access.Verb.Readonly() {
		return nil
	}

	return status.Error(codes.PermissionDenied, "not authorized")
}
