package incus_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus"
)

// TestResumedRevertDoesNotRestoreAgain: a revert killed after it restored
// the snapshot and started the instance runs again (Resumed); the old VM
// may have served since, so the snapshot must not be restored again.
func TestResumedRevertDoesNotRestoreAgain(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := launch(t, c, "resumed", true, map[string]string{"user.app": "jellyfin"})
	s := newStep(t, p, incus.InstanceState, "old", map[string]cty.Value{
		"instance": str(name), "state": str("stopped"), "snapshot_before": cty.True,
		"restore_on_rollback": cty.True, "force_after": cty.True, "stop_timeout": str("20s"),
	})
	r := s.mustApply(s.mustPlan(nil).Private, nil)
	s.revert(r.Revert)
	i := inst(t, c, name)
	if i.Status != "Running" || i.Config["user.app"] != "jellyfin" {
		t.Fatalf("after the revert: %s, user.app = %q", i.Status, i.Config["user.app"])
	}
	// The old VM serves again and changes.
	put := i.Put()
	put.Config["user.app"] = "written after the rollback"
	if err := c.UpdateInstance(ctxT(t, 30*time.Second), name, put, ""); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	rr := p.Revert(ctxT(t, 120*time.Second), providers.RevertRequest{Type: s.typ, Addr: s.addr, Config: s.cfg, Revert: *r.Revert, Resumed: true, Log: &log})
	if err := rr.Diagnostics.Err(); err != nil {
		t.Fatalf("resumed revert: %v\n%s", err, log.String())
	}
	i = inst(t, c, name)
	if i.Status != "Running" || i.Config["user.app"] != "written after the rollback" {
		t.Errorf("a resumed revert restored the snapshot again: %s, user.app = %q\n%s", i.Status, i.Config["user.app"], log.String())
	}
}
