package incus_test

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// TestInstanceDevicesHandedOver: a later step of the runbook removes a
// declared device (the install ISO detached after the install). Read
// again with Rebase once it ran, the instance hands the device over: the
// plan then has nothing to change and says why, the read is not drift,
// and a change of that device's declaration in the runbook is planned.
func TestInstanceDevicesHandedOver(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := unique("handover")
	cleanupInstance(t, c, name)
	share, other := t.TempDir(), t.TempDir()
	devs := map[string]map[string]string{
		"data":    {"type": "disk", "source": share, "path": "/mnt/data"},
		"install": {"type": "disk", "source": other, "path": "/mnt/install"},
	}
	cfg := map[string]cty.Value{"name": str(name), "type": str("container"), "image": str(testImage), "devices": devMap(devs)}
	s := newStep(t, p, incus.Instance, "talos", cfg)
	prior := priorOf(s.mustApply(s.mustPlan(nil).Private, nil))

	// The later step: the install device goes.
	i, etag, err := c.Instance(ctxT(t, 10*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	put := incusapi.InstancePut{Architecture: i.Architecture, Config: i.Config, Devices: maps.Clone(i.Devices), Profiles: i.Profiles, Description: i.Description}
	delete(put.Devices, "install")
	if err := c.UpdateInstance(ctxT(t, 30*time.Second), name, put, etag); err != nil {
		t.Fatal(err)
	}
	if rd := s.read(prior); rd.Observation != providers.Drifted {
		t.Fatalf("before the hand-over the removed device reads %v", rd.Observation)
	}
	rebased := p.Read(ctxT(t, 10*time.Second), providers.ReadRequest{Type: incus.Instance, Addr: s.addr, Config: s.cfg, Prior: prior, Rebase: true})
	if rebased.Diagnostics.HasErrors() || !strings.Contains(string(rebased.Private), `"handed_over":{"install":`) {
		t.Fatalf("the rebase read: %s %v", rebased.Private, rebased.Diagnostics.Err())
	}
	prior.Private = rebased.Private
	if rd := s.read(prior); rd.Observation != providers.Present {
		t.Fatalf("after the hand-over the instance reads %v %q", rd.Observation, rd.Detail)
	}
	wantContains(t, "the plan after the hand-over", s.mustPlan(prior).Diff, "nothing to change", "as a later step left it, not drift: device install removed")

	// The runbook changes the device: that is planned, and applied.
	devs["install"] = map[string]string{"type": "disk", "source": other, "path": "/mnt/elsewhere"}
	cfg["devices"] = devMap(devs)
	s2 := newStep(t, p, incus.Instance, "talos", cfg)
	pl := s2.mustPlan(prior)
	wantContains(t, "a changed declaration", pl.Diff, "+ device install")
	s2.mustApply(pl.Private, prior)
	if got := inst(t, c, name).Devices["install"]["path"]; got != "/mnt/elsewhere" {
		t.Fatalf("the device declared anew: path %q", got)
	}
}
