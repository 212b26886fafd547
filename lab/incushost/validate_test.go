package incushost

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestProviderGoldenRequestsPass: the requests the incus provider sends
// for VMs (its golden files; VMs cannot run against the real daemon
// here) pass the lab's rules, which the validation corpus holds to the
// daemon's (providers/incus/incusapi, against both), once the volumes
// and host paths they name exist.
func TestProviderGoldenRequestsPass(t *testing.T) {
	s, err := New(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join("..", "..", "providers", "incus", "testdata", "golden", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden requests (%v)", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var req instancesPost
		if err := json.Unmarshal(b, &req); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		s.mu.Lock()
		for _, d := range req.Devices { // the volumes they name exist, as the runbook's incus_volume steps make them
			if d["type"] == "disk" && d["pool"] != "" && isVolumeSource(d["source"]) {
				s.volumes[d["pool"]+"/"+d["source"]] = &volume{Pool: d["pool"], Name: d["source"], ContentType: "block"}
			}
			// ...and so do the host paths, on the host they are meant for:
			// here, a copy under the test's directory.
			if src := d["source"]; d["type"] == "disk" && d["pool"] == "" && filepath.IsAbs(src) {
				d["source"] = filepath.Join(t.TempDir(), src)
				if err := os.MkdirAll(d["source"], 0o755); err != nil {
					t.Fatal(err)
				}
			}
		}
		err = s.createRejection(&instance{Name: req.Name, Type: req.Type, Config: req.Config, Devices: req.Devices})
		s.mu.Unlock()
		if err != nil {
			t.Errorf("%s: the daemon would refuse it: %v", filepath.Base(f), err)
		}
	}
}

// TestVMOnlyKeys: a key of one instance type is unknown to the other.
func TestVMOnlyKeys(t *testing.T) {
	for _, tc := range []struct{ typ, key, value, want string }{
		{"virtual-machine", "security.secureboot", "false", ""},
		{"container", "security.secureboot", "false", "Unknown configuration key: security.secureboot"},
		{"virtual-machine", "security.privileged", "true", "Unknown configuration key: security.privileged"},
		{"virtual-machine", "boot.autostart", "maybe", `Invalid value for a boolean "maybe"`},
	} {
		err := checkConfigKey(tc.typ, tc.key, tc.value)
		if got := ""; err != nil {
			got = err.Error()
			if got != tc.want {
				t.Errorf("%s %s=%s: %q, want %q", tc.typ, tc.key, tc.value, got, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("%s %s=%s accepted, want %q", tc.typ, tc.key, tc.value, tc.want)
		}
	}
}
