package incus_test

import (
	"context"
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
	providertest.Run(t, providertest.Harness{
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
}
