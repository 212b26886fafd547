package incus_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/incus"
)

var update = flag.Bool("update", false, "rewrite the golden request bodies in testdata/golden")

// TestVMRequestGolden checks the POST /1.0/instances bodies the provider
// would send for VM-only devices (which cannot run here) against golden
// files. Regenerate with: go test ./providers/incus/ -run TestVMRequestGolden -update
func TestVMRequestGolden(t *testing.T) {
	t.Parallel()
	cases := map[string]map[string]cty.Value{
		// The brief's Talos VM: ZFS data shared by virtiofs (tag incus_data),
		// the 150 GiB bulk disk as a custom volume, the iGPU passed through.
		"talos-vm": {
			"name":     str("talos"),
			"image":    str("talos-v1.13.3"),
			"cpu":      cty.NumberIntVal(4),
			"memory":   str("16GiB"),
			"profiles": cty.ListVal([]cty.Value{str("default")}),
			"config":   strMap(map[string]string{"security.secureboot": "false"}),
			"devices": devMap(map[string]map[string]string{
				"data": {"type": "disk", "source": "/tank/data", "path": "/var/mnt/data"},
				"bulk": {"type": "disk", "pool": "default", "source": "bulk"},
				"gpu":  {"type": "gpu", "gputype": "physical", "pci": "0000:00:02.0"},
			}),
			"start": cty.True,
		},
		// An empty VM installed from the Talos ISO, with a sized root disk.
		"empty-vm-iso": {
			"name":   str("talos-install"),
			"empty":  cty.True,
			"cpu":    cty.NumberIntVal(2),
			"memory": str("4GiB"),
			"config": strMap(map[string]string{"security.secureboot": "false"}),
			"devices": devMap(map[string]map[string]string{
				"root": {"type": "disk", "pool": "default", "path": "/", "size": "64GiB"},
				"iso":  {"type": "disk", "source": "/var/lib/images/talos-v1.13.3-metal-amd64.iso", "boot.priority": "10"},
				"bulk": {"type": "disk", "pool": "default", "source": "bulk"}, // sized by its incus_volume: the daemon refuses a size on any disk but the root
			}),
		},
		// By fingerprint.
		"vm-fingerprint": {
			"name":  str("old-home"),
			"image": str("c191633392d4"),
		},
	}
	notes := map[string][]string{
		"talos-vm":     {`+ device data {path="/var/mnt/data", source="/tank/data", type="disk"}  (a host directory shared through virtiofs, mount tag "incus_data")`, "+ device gpu", "(physical GPU passthrough)", "(a block disk from a storage volume)", ", then start it"},
		"empty-vm-iso": {`+ create virtual-machine "talos-install" with an empty root disk`, "(an ISO attached as a CD-ROM)", `boot.priority="10"`},
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			spec, diags := incus.DecodeInstance(phases.Address{Type: incus.Instance, Name: name}, cty.ObjectVal(cfg))
			if diags.HasErrors() {
				t.Fatal(diags.Err())
			}
			wantContains(t, "the plan of "+name, incus.CreateDiff(spec), notes[name]...)
			got, err := json.MarshalIndent(incus.CreateRequest(spec, "incus_instance."+name), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", "golden", name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil || string(want) != string(got) {
				t.Errorf("%s differs from the body the provider builds (%v):\n%s\nIf the change is intended, run: go test ./providers/incus/ -run TestVMRequestGolden -update", path, err, got)
			}
		})
	}
}
