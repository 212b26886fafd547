package incus_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/providertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	c := client(t)
	created := unique("conf")
	cleanupInstance(t, c, created)
	vol := unique("conf-vol")
	cleanupVolume(t, c, vol)
	old := launch(t, c, "conf-old", true, nil)
	snaps := launch(t, c, "conf-snap", false, nil)
	for _, s := range []string{"to-restore", "to-delete"} {
		if err := c.CreateSnapshot(ctxT(t, 30*time.Second), snaps, s, false); err != nil {
			t.Fatal(err)
		}
	}
	box := launch(t, c, "conf-box", true, nil)
	devVol := fsVolume(t, c, "conf-dev")
	local := t.TempDir()
	if err := os.WriteFile(filepath.Join(local, "push.conf"), []byte("pushed by the conformance suite\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := c.PushFile(ctxT(t, 10*time.Second), box, "/root/pull.conf", incusapi.FilePut{Content: strings.NewReader("pulled\n")}); err != nil {
		t.Fatal(err)
	}
	if code, out := execIn(t, c, box, "sh", "-c", "mkdir -p /root/sync-src/d && echo one > /root/sync-src/a && echo two > /root/sync-src/d/b"); code != 0 {
		t.Fatalf("making /root/sync-src: %s", out)
	}
	providertest.Run(t, providertest.Harness{
		Dir: local,
		New: func() providers.Interface { return incus.New() },
		Cases: []providertest.Case{
			{Type: incus.Instance, Reversible: true, Config: obj(map[string]cty.Value{
				"name": str(created), "type": str("container"), "image": str(testImage), "memory": str("128MiB"),
				"config": strMap(map[string]string{"user.purpose": "conformance-case"}),
			})},
			{Type: incus.InstanceState, Reversible: true, Config: obj(map[string]cty.Value{
				"instance": str(old), "state": str("stopped"), "snapshot_before": cty.True, "restore_on_rollback": cty.True, "force_after": cty.True,
			})},
			{Type: incus.Snapshot, Reversible: true, Config: obj(map[string]cty.Value{"instance": str(snaps), "name": str("created-by-conformance")})},
			{Type: incus.Snapshot, Reversible: true, Config: obj(map[string]cty.Value{"instance": str(snaps), "name": str("to-restore"), "action": str("restore"), "snapshot_before": cty.True})},
			{Type: incus.Snapshot, Config: obj(map[string]cty.Value{"instance": str(snaps), "name": str("to-delete"), "action": str("delete")})},
			{Type: incus.Volume, Reversible: true, Config: obj(map[string]cty.Value{"name": str(vol), "size": str("8MiB")})},
			{Type: incus.Exec, Reversible: true, Config: obj(map[string]cty.Value{
				"instance": str(box), "command": list("sh", "-c", "echo run >> /root/runs; touch /root/made"),
				"creates": str("/root/made"), "revert": list("rm", "-f", "/root/made"), "env": strMap(map[string]string{"A": "b"}),
			})},
			{Type: incus.File, Reversible: true, Config: obj(map[string]cty.Value{"instance": str(box), "source": str("push.conf"), "destination": str("/root/push.conf"), "mode": str("0600")})},
			{Type: incus.Sync, Reversible: true, Config: obj(map[string]cty.Value{"instance": str(box), "source": str("/root/sync-src"), "destination": str("/root/sync-copy"), "critical": list("*.db")})},
			{Type: incus.Device, Reversible: true, Config: obj(map[string]cty.Value{"instance": str(box), "name": str("conf-data"),
				"device": strMap(map[string]string{"type": "disk", "pool": "default", "source": devVol, "path": "/mnt/conf"})})},
			{Type: incus.File, Reversible: true, Config: obj(map[string]cty.Value{"instance": str(box), "direction": str("pull"), "source": str("/root/pull.conf"), "destination": str("pulled.conf")})},
		},
	})
	// The reverts left things as they were.
	st, err := c.InstanceState(context.Background(), old)
	if err != nil || st.Status != "Running" {
		t.Errorf("the stopped instance was not started again: %v %v", st, err)
	}
	if _, _, err := c.Instance(context.Background(), created); !incusapi.IsNotFound(err) {
		t.Errorf("the created instance was not deleted: %v", err)
	}
	if _, _, err := c.StorageVolume(context.Background(), "default", vol); !incusapi.IsNotFound(err) {
		t.Errorf("the created volume was not deleted: %v", err)
	}
	if readIn(t, c, box, "/root/runs") != "run\n" || stat(t, c, box, "/root/made") != nil || stat(t, c, box, "/root/push.conf") != nil {
		t.Errorf("incus_exec ran %q times (want once), or a revert left /root/made or /root/push.conf", readIn(t, c, box, "/root/runs"))
	}
	if stat(t, c, box, "/root/sync-copy") != nil || stat(t, c, box, "/var/lib/migrate-sync/%2Froot%2Fsync-copy.manifest") != nil {
		t.Errorf("the warm pass's revert left its copy or its manifest")
	}
	if i := inst(t, c, box); i.Devices["conf-data"] != nil {
		t.Errorf("the attached device was not detached: %v", i.Devices)
	}
	if _, err := os.Stat(filepath.Join(local, "pulled.conf")); !os.IsNotExist(err) {
		t.Errorf("the pulled file was not removed: %v", err)
	}
}
