package incushost

import (
	"io/fs"
	"net/http"

	"path/filepath"
	"runtime"
	"syscall"
)

// Hardware is what the host's /1.0/resources reports: its CPU threads,
// memory, GPUs and disks (Options.Hardware). The lab has no PCI bus of its
// own: a home's hardware is described, not probed.
type Hardware struct {
	CPUs   int   // threads; 0: the machine running the lab's
	Memory int64 // bytes; 0: 16GiB
	GPUs   []GPU
	Disks  []HostDisk
	// PoolSizes are the pools' total sizes in bytes by name; a pool not
	// listed reports the file system its directory is on (statfs).
	PoolSizes map[string]int64
}

// GPU is a GPU of the host on its PCI bus.
type GPU struct {
	PCIAddress, Driver, DriverVersion, Vendor, VendorID, Product, ProductID string
	// Card and Render are its DRM nodes ("card0", "renderD128") while a
	// host driver drives it.
	Card, Render string
}

// HostDisk is a disk of the host (Disk is a VM's).
type HostDisk struct {
	ID, Model, Type, Serial string // Type: "nvme", "sata", "scsi", "virtio"
	Size                    int64
	PCIAddress              string
}

// getResources is GET /1.0/resources, in the daemon's shape.
func (s *Server) getResources(w http.ResponseWriter, _ *http.Request) {
	hw := s.opts.Hardware
	if hw == nil {
		hw = &Hardware{}
	}
	cpus, mem := hw.CPUs, hw.Memory
	if cpus == 0 {
		cpus = runtime.NumCPU()
	}
	if mem == 0 {
		mem = 16 << 30
	}
	cards := []map[string]any{}
	for _, g := range hw.GPUs {
		c := map[string]any{"driver": g.Driver, "driver_version": g.DriverVersion, "pci_address": g.PCIAddress,
			"vendor": g.Vendor, "vendor_id": g.VendorID, "product": g.Product, "product_id": g.ProductID, "numa_node": 0}
		if g.Card != "" {
			c["drm"] = map[string]any{"id": 0, "card_name": g.Card, "card_device": "226:0", "render_name": g.Render, "render_device": "226:128"}
		}
		cards = append(cards, c)
	}
	disks := []map[string]any{}
	for _, d := range hw.Disks {
		disks = append(disks, map[string]any{"id": d.ID, "device": "259:0", "model": d.Model, "type": d.Type, "read_only": false,
			"size": d.Size, "removable": false, "serial": d.Serial, "device_path": "pci-" + d.PCIAddress, "pci_address": d.PCIAddress,
			"numa_node": 0, "block_size": 512, "rpm": 0, "partitions": []any{}})
	}
	syncOK(w, map[string]any{
		"cpu":     map[string]any{"architecture": "x86_64", "total": cpus, "sockets": []any{}},
		"memory":  map[string]any{"used": mem / 8, "total": mem, "nodes": []any{}, "hugepages_total": 0, "hugepages_used": 0},
		"gpu":     map[string]any{"cards": cards, "total": len(cards)},
		"storage": map[string]any{"disks": disks, "total": len(disks)},
		"network": map[string]any{"cards": []any{}, "total": 0},
		"system":  map[string]any{"type": "physical"},
	})
}

// getPoolResources is GET /1.0/storage-pools/{pool}/resources: the
// pool's size (Hardware.PoolSizes, else its file system's) and what its
// directory holds.
func (s *Server) getPoolResources(w http.ResponseWriter, r *http.Request) {
	p := r.PathValue("pool")
	if !s.hasPool(p) {
		// The daemon's answer, a 500 where the pool's own GET is a 404.
		fail(w, http.StatusInternalServerError, "Storage pool not found")
		return
	}
	dir := filepath.Join(s.dir, "storage", p)
	var total, used int64
	if hw := s.opts.Hardware; hw != nil && hw.PoolSizes[p] > 0 {
		total, used = hw.PoolSizes[p], duBytes(dir)
	} else {
		var st syscall.Statfs_t
		if err := syscall.Statfs(s.dir, &st); err != nil {
			fail(w, http.StatusInternalServerError, "Failed getting pool resources: %v", err)
			return
		}
		total, used = int64(st.Blocks)*st.Bsize, int64(st.Blocks-st.Bfree)*st.Bsize
	}
	syncOK(w, map[string]any{"space": map[string]any{"used": used, "total": total},
		"inodes": map[string]any{"used": 0, "total": 0}})
}

// duBytes is the size of the files under dir.
func duBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
