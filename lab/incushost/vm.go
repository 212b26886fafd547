package incushost

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// VMSpec is what the BootVM hook is told of a virtual machine it boots.
type VMSpec struct {
	Name string
	// Config and Devices are the instance's, over its profiles'.
	Config  map[string]string
	Devices map[string]map[string]string
	// Disks are its disk devices, sorted by name.
	Disks []Disk
	// ISO is the path of the ISO file it boots from.
	ISO string
	// DataShare is the host directory of its first shared directory (a
	// disk device whose source is a host path or a filesystem custom
	// volume, virtiofs on a real host, in device name order); empty
	// without one.
	DataShare string
	// GPU: a device of type gpu is attached.
	GPU bool
	// NICs are its nic devices, sorted by device name.
	NICs []NIC
	// IPv4 is the address the lab gives it (127.0.1.N), reported as eth0's;
	// with a NIC on the LAN, the address the LAN's DHCP server leases to
	// its MAC, which Incus does not report ("" when it leases none).
	IPv4 string
	// LAN: its first NIC is bridged onto the LAN (Options.LAN).
	LAN bool
	// ConfigDrive holds the files of its cloud-init:config disk (the ISO
	// labelled cidata the daemon writes at each start from the
	// cloud-init.* keys: user-data, vendor-data, meta-data, and
	// network-config when set); nil without such a disk.
	ConfigDrive map[string]string
	// Dir is where the guest keeps what is on its disks: inside the
	// instance's directory, so that it goes when the instance is deleted
	// (a new VM of the same name starts from an empty disk).
	Dir string
}

// Disk is a disk device of a VM.
type Disk struct {
	Device string // the device's name
	Path   string // where it is mounted in the guest ("/" for root, "" for a block disk)
	Pool   string
	Source string // a volume's name, or a host path for a shared directory
	// Size in bytes: the device's size, else its volume's; 0 when unknown.
	Size int64
	// File is the volume's file on the host (an ISO); empty otherwise.
	File string
	ISO  bool
	// Shared: Source is a host directory, or a filesystem volume (whose
	// directory is then VMSpec.DataShare when it is the first).
	Shared bool
	// Dir is a shared disk's host directory: the host path, or the
	// filesystem volume's directory.
	Dir string
}

// NIC is a nic device of a VM.
type NIC struct {
	Device string // the device's name
	Name   string // the interface's name in the guest: the device's name option, else the device's
	// MAC is its hwaddr option, else volatile.<device>.hwaddr (made at
	// creation, as the daemon does), lower case as the guest shows it.
	MAC     string
	Network string // the managed network it joins, or
	Parent  string // the host interface (a bridge) it is attached to
}

// Guest is a booted VM; Stop ends it (the VM stopped, or the lab closed).
// Stop is called with the lab's lock held: it should return promptly.
// BootVM is called without it, with a context that ends when the lab
// closes (or after 5 minutes).
type Guest interface {
	Stop() error
}

// isoFile returns the ISO a VM boots from: an ISO volume's file, or a
// disk whose source is a host file named *.iso; the caller holds s.mu.
func (s *Server) isoFile(in *instance) string {
	if in.Type != "virtual-machine" {
		return ""
	}
	_, devs := s.expanded(in)
	for _, name := range slices.Sorted(maps.Keys(devs)) {
		d := devs[name]
		if d["type"] != "disk" || d["source"] == "" {
			continue
		}
		if isISOPath(d["source"]) {
			return d["source"]
		}
		if v := s.volumes[orStr(d["pool"], s.defaultPool())+"/"+d["source"]]; v != nil && v.ContentType == "iso" {
			return s.volPath(v.Pool, v.Name, ".iso")
		}
	}
	return ""
}

func isISOPath(p string) bool {
	return strings.HasPrefix(p, "/") && strings.HasSuffix(strings.ToLower(p), ".iso")
}

func (s *Server) needsBoot(in *instance) bool { return s.isoFile(in) != "" }

// vmSpec describes a VM for BootVM; the caller holds s.mu.
func (s *Server) vmSpec(in *instance) (VMSpec, error) {
	cfg, devs := s.expanded(in)
	spec := VMSpec{Name: in.Name, Config: cfg, Devices: devs, IPv4: in.IPv4, Dir: filepath.Join(in.dir, "guest")}
	if mac, addr, lan := s.lanAddress(in); lan {
		if addr == "" {
			// No lease: the VM boots, but where on the LAN nobody knows.
			s.logf("incus lab: %s: the LAN's DHCP server has no address for %s; the VM is unreachable", in.Name, mac)
		}
		spec.IPv4, spec.LAN = addr, true
	}
	for _, name := range slices.Sorted(maps.Keys(devs)) {
		d := devs[name]
		switch d["type"] {
		case "gpu":
			spec.GPU = true
		case "nic":
			spec.NICs = append(spec.NICs, NIC{Device: name, Name: orStr(d["name"], name),
				MAC:     nicMAC(cfg, name, d),
				Network: d["network"], Parent: d["parent"]})
		case "disk":
			disk := Disk{Device: name, Path: d["path"], Pool: d["pool"], Source: d["source"]}
			if sz := d["size"]; sz != "" {
				n, err := parseSize(sz)
				if err != nil {
					return spec, errf(http.StatusBadRequest, "Device %q of VM %q: %v", name, in.Name, err)
				}
				disk.Size = n
			}
			switch {
			case isConfigDrive(d["source"]) && d["source"] == configDriveSource:
				spec.ConfigDrive = configDrive(in.Name, cfg)
				continue // the guest's CD-ROM, not one of its disks
			case isISOPath(d["source"]):
				disk.ISO, disk.File = true, d["source"]
				if st, err := os.Stat(d["source"]); err == nil && disk.Size == 0 {
					disk.Size = st.Size()
				}
				spec.ISO = disk.File
			case strings.HasPrefix(d["source"], "/"):
				disk.Shared, disk.Dir = true, d["source"]
				if spec.DataShare == "" {
					spec.DataShare = d["source"]
				}
			case d["source"] != "":
				disk.Pool = orStr(d["pool"], s.defaultPool())
				v := s.volumes[disk.Pool+"/"+d["source"]]
				if v == nil {
					return spec, errf(http.StatusBadRequest, "Device %q of VM %q: no volume %q in pool %q", name, in.Name, d["source"], disk.Pool)
				}
				if disk.Size == 0 && v.Config["size"] != "" {
					disk.Size, _ = parseSize(v.Config["size"])
				}
				switch v.ContentType {
				case "iso":
					disk.ISO, disk.File = true, s.volPath(v.Pool, v.Name, ".iso")
					spec.ISO = disk.File
				case "filesystem": // shared with the guest, as a host path
					disk.Shared, disk.Dir = true, s.volDir(v.Pool, v.Name)
					if spec.DataShare == "" {
						spec.DataShare = s.volDir(v.Pool, v.Name)
					}
				}
			}
			spec.Disks = append(spec.Disks, disk)
		}
	}
	return spec, nil
}

// configDriveSource is the disk source of the cloud-init config drive;
// agent:config is the agent's drive.
const configDriveSource = "cloud-init:config"

func isConfigDrive(src string) bool { return src == configDriveSource || src == "agent:config" }

// configDrive is what the daemon writes on the config drive at start
// (internal/server/device/disk.go generateVMConfigDrive): each
// cloud-init.* key, else its user.* legacy key, else an empty
// #cloud-config; meta-data names the instance.
func configDrive(name string, cfg map[string]string) map[string]string {
	pick := func(key, legacy, def string) (string, bool) {
		if v, ok := cfg["cloud-init."+key]; ok {
			return v, true
		}
		if v := cfg["user."+legacy]; v != "" {
			return v, true
		}
		return def, def != ""
	}
	files := map[string]string{
		"meta-data": fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n%s\n", name, name, cfg["user.meta-data"]),
	}
	for _, f := range []string{"user-data", "vendor-data"} {
		files[f], _ = pick(f, f, "#cloud-config\n{}")
	}
	if v, ok := pick("network-config", "network-config", ""); ok && v != "" {
		files["network-config"] = v
	}
	return files
}

// parseSize reads Incus sizes: bytes, or a number with kB/MB/GB/TB
// (powers of 1000) or KiB/MiB/GiB/TiB (powers of 1024).
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"kB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}
