package incus_test

import (
	"bytes"
	"io"
	"maps"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// fsVolume creates a filesystem custom volume in the default pool,
// deleted when the test ends.
func fsVolume(t testing.TB, c *incusapi.Client, prefix string) string {
	t.Helper()
	name := unique(prefix)
	if err := c.CreateStorageVolume(ctxT(t, 30*time.Second), "default", incusapi.StorageVolumesPost{Name: name, ContentType: "filesystem"}); err != nil {
		t.Fatal(err)
	}
	cleanupVolume(t, c, name)
	return name
}

// execIn runs a command in an instance and returns its exit code and
// output: commands see the mounts (the lab's files API sees only the
// rootfs).
func execIn(t testing.TB, c *incusapi.Client, name string, argv ...string) (int, string) {
	t.Helper()
	e, err := c.StartExec(ctxT(t, 30*time.Second), name, incusapi.ExecPost{Command: argv})
	if err != nil {
		t.Fatalf("exec %v in %s: %v", argv, name, err)
	}
	var out bytes.Buffer
	code, err := c.FollowExec(ctxT(t, 60*time.Second), e, &out, io.Discard, 50*time.Millisecond)
	if err != nil {
		t.Fatalf("exec %v in %s: %v", argv, name, err)
	}
	return code, out.String()
}

func setDevice(t testing.TB, c *incusapi.Client, name, dev string, d map[string]string) {
	t.Helper()
	i, etag, err := c.Instance(ctxT(t, 10*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	put := i.Put()
	if put.Devices == nil {
		put.Devices = map[string]map[string]string{}
	}
	if d == nil {
		delete(put.Devices, dev)
	} else {
		put.Devices[dev] = d
	}
	if err := c.UpdateInstance(ctxT(t, 60*time.Second), name, put, etag); err != nil {
		t.Fatal(err)
	}
}

// TestDeviceHotplugsAVolume: a filesystem volume attached to a running
// container is there at once; a file written inside is in the volume
// (another container that mounts it reads it); someone removing the
// device is drift; rollback detaches it.
func TestDeviceHotplugsAVolume(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	vol := fsVolume(t, c, "dev-vol")
	box := launch(t, c, "dev-box", true, nil)
	dev := map[string]string{"type": "disk", "pool": "default", "source": vol, "path": "/mnt/data"}
	s := newStep(t, p, incus.Device, "data", map[string]cty.Value{"instance": str(box), "name": str("data"), "device": strMap(dev)})
	pl := s.mustPlan(nil)
	wantContains(t, "the plan", pl.Diff, "+ attach disk data (pool default, volume "+vol+") at /mnt/data to "+box+" (running: hot-plugged)", "rollback: detach it")
	r := s.mustApply(pl.Private, nil)
	if got := r.Outputs.GetAttr("path").AsString(); got != "/mnt/data" || r.Outputs.GetAttr("instance").AsString() != box {
		t.Errorf("outputs: %#v", r.Outputs)
	}
	i := inst(t, c, box)
	if r.Identity != "instance "+box+" "+i.Config["volatile.uuid"] {
		t.Errorf("identity %q", r.Identity)
	}
	if !maps.Equal(i.Devices["data"], dev) {
		t.Fatalf("devices after apply: %v", i.Devices)
	}
	if code, _ := execIn(t, c, box, "sh", "-c", "echo from-inside > /mnt/data/note"); code != 0 {
		t.Fatalf("writing through the hot-plugged disk exited %d", code)
	}
	prior := priorOf(r)
	if rd := s.read(prior); rd.Observation != providers.Present || rd.Identity != r.Identity {
		t.Fatalf("Read after apply: %v %s %q", rd.Observation, rd.Detail, rd.Identity)
	}
	wantContains(t, "the plan after apply", s.mustPlan(prior).Diff, "nothing to change")

	// Someone removes it: drift, and the plan attaches it again.
	setDevice(t, c, box, "data", nil)
	if rd := s.read(prior); rd.Observation != providers.Drifted {
		t.Fatalf("Read after the device was removed: %v %s", rd.Observation, rd.Detail)
	} else {
		wantContains(t, "the drift", rd.Detail, "device data is not there")
	}
	r = s.mustApply(s.mustPlan(prior).Private, prior)

	s.revert(r.Revert)
	if i := inst(t, c, box); i.Devices["data"] != nil {
		t.Fatalf("rollback left the device: %v", i.Devices)
	}
	if code, _ := execIn(t, c, box, "test", "-e", "/mnt/data/note"); code == 0 {
		t.Error("the detached volume's file is still seen in the container")
	}
	// The file is in the volume: another container mounting it reads it.
	other := launch(t, c, "dev-other", false, nil)
	setDevice(t, c, other, "data", dev)
	if err := c.SetState(ctxT(t, 60*time.Second), other, incusapi.InstanceStatePut{Action: "start"}); err != nil {
		t.Fatal(err)
	}
	if _, got := execIn(t, c, other, "cat", "/mnt/data/note"); got != "from-inside\n" {
		t.Errorf("the volume holds %q, want the file written through the device", got)
	}
}

// TestDeviceAbsentThenRollbackRestores: a device detached by ensure =
// absent comes back on rollback with exactly its options.
func TestDeviceAbsentThenRollbackRestores(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	vol := fsVolume(t, c, "dev-abs")
	box := launch(t, c, "dev-abs", false, nil)
	dev := map[string]string{"type": "disk", "pool": "default", "source": vol, "path": "/srv/media", "readonly": "true"}
	setDevice(t, c, box, "media", dev)
	s := newStep(t, p, incus.Device, "media", map[string]cty.Value{"instance": str(box), "name": str("media"), "ensure": str("absent")})
	pl := s.mustPlan(nil)
	wantContains(t, "the plan", pl.Diff, "- detach disk media (pool default, volume "+vol+", read-only) at /srv/media from "+box+" (stopped: in effect from its next start)", "rollback: put it back as it was")
	r := s.mustApply(pl.Private, nil)
	if i := inst(t, c, box); i.Devices["media"] != nil {
		t.Fatalf("ensure = absent left the device: %v", i.Devices)
	}
	if rd := s.read(priorOf(r)); rd.Observation != providers.Present {
		t.Fatalf("Read after detach: %v %s", rd.Observation, rd.Detail)
	}
	s.revert(r.Revert)
	if i := inst(t, c, box); !maps.Equal(i.Devices["media"], dev) {
		t.Fatalf("rollback put back %v, want %v", i.Devices["media"], dev)
	}
}

// TestDeviceETagConflict: a change made between plan and apply is
// refused, and nothing is attached.
func TestDeviceETagConflict(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	vol := fsVolume(t, c, "dev-etag")
	box := launch(t, c, "dev-etag", false, nil)
	s := newStep(t, p, incus.Device, "data", map[string]cty.Value{"instance": str(box), "name": str("data"),
		"device": strMap(map[string]string{"type": "disk", "pool": "default", "source": vol, "path": "/mnt/data"})})
	pl := s.mustPlan(nil)
	i := inst(t, c, box)
	put := i.Put()
	put.Config["user.meanwhile"] = "someone else"
	if err := c.UpdateInstance(ctxT(t, 30*time.Second), box, put, ""); err != nil {
		t.Fatal(err)
	}
	r, log := s.apply(ctxT(t, 60*time.Second), pl.Private, nil)
	wantDiag(t, r.Diagnostics, "Concurrent Change", "changed after the plan read it", "Make a new plan")
	if after := inst(t, c, box); after.Devices["data"] != nil || after.Config["user.meanwhile"] != "someone else" {
		t.Errorf("after the refused apply: %v %v (log %s)", after.Devices, after.Config, log)
	}
}

// TestDeviceMissingVolumeRefusedAtPlan: a volume the host lacks is
// refused by the plan, naming those its pool has.
func TestDeviceMissingVolumeRefusedAtPlan(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	vol := fsVolume(t, c, "dev-there")
	box := launch(t, c, "dev-miss", false, nil)
	s := newStep(t, p, incus.Device, "data", map[string]cty.Value{"instance": str(box), "name": str("data"),
		"device": strMap(map[string]string{"type": "disk", "pool": "default", "source": "no-such-volume", "path": "/mnt/data"})})
	wantDiag(t, s.plan(nil).Diagnostics, "Unknown Storage Volume", `"no-such-volume" of pool "default"`, vol, "Nothing was changed")
	if i := inst(t, c, box); i.Devices["data"] != nil {
		t.Errorf("a refused plan changed the instance: %v", i.Devices)
	}
}
