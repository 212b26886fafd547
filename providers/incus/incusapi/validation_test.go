package incusapi

import (
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/providers/incus/internal/incustest"
)

// validationCorpus is one set of instance requests that the daemon
// accepts or refuses, with the words of its refusal. The suite runs it
// against the real daemon (`make test`) and against the lab's Incus
// host (`make test-incus-lab`): both must accept and refuse alike, so
// that the lab hides no request the daemon would refuse. Containers
// only: VMs cannot run here (the lab's own tests check the provider's
// VM requests against its rules).
var validationCorpus = []struct {
	name    string
	config  map[string]string
	devices map[string]map[string]string
	refusal string // "" when accepted
}{
	{name: "user-keys", config: map[string]string{"user.app": "jellyfin", "boot.autostart": "false", "limits.cpu": "1", "limits.memory": "256MiB"}},
	{name: "root-size", devices: map[string]map[string]string{"root": {"type": "disk", "path": "/", "pool": "default", "size": "2GiB"}}},
	{name: "dir-share", devices: map[string]map[string]string{"share": {"type": "disk", "path": "/mnt/share", "source": "/tmp", "readonly": "true"}}},
	{name: "unknown-key", config: map[string]string{"foo.bar": "1"}, refusal: "Unknown configuration key: foo.bar"},
	{name: "vm-key", config: map[string]string{"security.secureboot": "false"}, refusal: "Unknown configuration key: security.secureboot"},
	{name: "bad-bool", config: map[string]string{"boot.autostart": "maybe"}, refusal: `Invalid value for a boolean "maybe"`},
	{name: "bad-memory", config: map[string]string{"limits.memory": "lots"}, refusal: "Invalid value: lots"},
	{name: "bad-cpu", config: map[string]string{"limits.cpu": "two"}, refusal: "Invalid CPU limit syntax"},
	{name: "size-not-root", devices: map[string]map[string]string{"x": {"type": "disk", "path": "/mnt/x", "source": "/tmp", "size": "1GiB"}},
		refusal: `Device validation failed for "x": Only the root disk may have a size quota`},
	{name: "unknown-option", devices: map[string]map[string]string{"x": {"type": "disk", "path": "/mnt/x", "source": "/tmp", "colour": "red"}},
		refusal: `Device validation failed for "x": Invalid device option "colour"`},
	{name: "bad-boot-priority", devices: map[string]map[string]string{"x": {"type": "disk", "path": "/mnt/x", "source": "/tmp", "boot.priority": "high"}},
		refusal: `Invalid value for device option "boot.priority": Invalid value for uint32 "high"`},
	{name: "unknown-type", devices: map[string]map[string]string{"x": {"type": "blah"}}, refusal: `Invalid device type "blah"`},
	{name: "no-pool", devices: map[string]map[string]string{"x": {"type": "disk", "path": "/mnt/x", "pool": "nosuchpool", "source": "vol"}},
		refusal: `Failed to get storage pool "nosuchpool": Storage pool not found`},
	{name: "no-volume", devices: map[string]map[string]string{"x": {"type": "disk", "path": "/mnt/x", "pool": "default", "source": "nosuchvolume"}},
		refusal: `Failed add validation for device "x": Failed loading custom volume: Storage volume not found`},
	{name: "no-network", devices: map[string]map[string]string{"eth1": {"type": "nic", "network": "nosuchnet"}},
		refusal: `Failed to load network "nosuchnet" for project "default": Network not found`},
	{name: "network-and-nictype", devices: map[string]map[string]string{"lan": {"type": "nic", "network": incustest.Network, "nictype": "bridged"}},
		refusal: `Cannot use "nictype" property in conjunction with "network" property`},
	{name: "bridged-on-lan", devices: map[string]map[string]string{"lan": {"type": "nic", "nictype": "bridged", "parent": incustest.Network, "hwaddr": "10:66:6A:4D:16:50"}}},
	{name: "bridged-no-parent", devices: map[string]map[string]string{"lan": {"type": "nic", "nictype": "bridged"}},
		refusal: `Device validation failed for "lan": Invalid value for device option "parent": Required value`},
	{name: "bad-mac", devices: map[string]map[string]string{"lan": {"type": "nic", "nictype": "bridged", "parent": incustest.Network, "hwaddr": "zz:16"}},
		refusal: `Invalid value for device option "hwaddr": Invalid MAC address, must be 6 bytes of hex separated by colons`},
	{name: "relative-source", devices: map[string]map[string]string{"x": {"type": "disk", "path": "/mnt/x", "source": "relative/path"}},
		refusal: `Device validation failed for "x": Source path must be absolute for local sources`},
	{name: "missing-source-path", devices: map[string]map[string]string{"x": {"type": "disk", "path": "/mnt/x", "source": "/nonexistent/migrate-test"}},
		refusal: `Failed add validation for device "x": Missing source path "/nonexistent/migrate-test" for disk "x"`},
	{name: "disk-without-path", devices: map[string]map[string]string{"x": {"type": "disk"}},
		refusal: `Disk entry is missing the required "source" or "path" property`},
}

// TestValidationCorpus creates a container of each request: accepted
// ones exist after, refused ones do not, with the daemon's words.
func TestValidationCorpus(t *testing.T) {
	c := socketClient(t)
	for _, tc := range validationCorpus {
		t.Run(tc.name, func(t *testing.T) {
			name := uniqueName("valid")
			req := InstancesPost{Name: name, Type: "container", Source: InstanceSource{Type: "image", Alias: testImage},
				InstancePut: InstancePut{Config: tc.config, Devices: tc.devices}}
			err := c.CreateInstance(ctxT(t, 2*time.Minute), req)
			if err == nil {
				t.Cleanup(func() { _ = c.DeleteInstance(ctxT(t, time.Minute), name) })
			}
			in, _, getErr := c.Instance(ctxT(t, 30*time.Second), name)
			switch {
			case tc.refusal == "" && err != nil:
				t.Fatalf("refused a request the daemon accepts: %v", err)
			case tc.refusal != "" && err == nil:
				t.Fatalf("accepted a request the daemon refuses (%q)", tc.refusal)
			case tc.refusal != "" && !strings.Contains(err.Error(), tc.refusal):
				t.Fatalf("refused in other words: %v\nthe daemon says: %s", err, tc.refusal)
			case tc.refusal != "" && !IsNotFound(getErr):
				t.Fatalf("a refused creation left instance %s behind (%v, %v)", name, in, getErr)
			}
		})
	}
}

// TestValidationCorpusUpdate sends the refused config and devices as a
// change of an existing container: refused alike, the container as it was.
func TestValidationCorpusUpdate(t *testing.T) {
	c := socketClient(t)
	name := uniqueName("valid-upd")
	if err := c.CreateInstance(ctxT(t, 2*time.Minute), InstancesPost{Name: name, Type: "container", Source: InstanceSource{Type: "image", Alias: testImage}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteInstance(ctxT(t, time.Minute), name) })
	for _, tc := range validationCorpus {
		if tc.refusal == "" || tc.name == "no-pool" || tc.name == "unknown-type" {
			continue // the daemon words a refused change of these otherwise
		}
		t.Run(tc.name, func(t *testing.T) {
			in, etag, err := c.Instance(ctxT(t, 30*time.Second), name)
			if err != nil {
				t.Fatal(err)
			}
			put := in.Put()
			for k, v := range tc.config {
				put.Config[k] = v
			}
			for k, d := range tc.devices {
				if put.Devices == nil {
					put.Devices = map[string]map[string]string{}
				}
				put.Devices[k] = d
			}
			err = c.UpdateInstance(ctxT(t, time.Minute), name, put, etag)
			if err == nil || !strings.Contains(err.Error(), tc.refusal) {
				t.Fatalf("a change the daemon refuses (%q): %v", tc.refusal, err)
			}
			after, _, err := c.Instance(ctxT(t, 30*time.Second), name)
			if err != nil {
				t.Fatal(err)
			}
			for k := range tc.config {
				if _, ok := after.Config[k]; ok {
					t.Errorf("the refused change set %s", k)
				}
			}
			for k := range tc.devices {
				if _, ok := after.Devices[k]; ok {
					t.Errorf("the refused change added device %s", k)
				}
			}
		})
	}
}
