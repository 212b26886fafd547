package incus_test

import (
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus"
)

// TestDeviceUnsetsCloudInit: once a node installed from its config
// drive, an incus_device step with ensure = "absent" and unset_config
// detaches the cloud-init:config drive and removes cloud-init.user-data
// in one update, never showing the value. The incus_instance step that
// declared both, read again with Rebase, hands them over: its plan has
// nothing to change (the key is not put back) and says why. Rollback of
// the device step puts the drive back, not the key (kept nowhere).
func TestDeviceUnsetsCloudInit(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := unique("nocloud")
	cleanupInstance(t, c, name)
	const userData = "version: v1alpha1 # the-cluster-ca-key\n"
	devs := map[string]map[string]string{"cidata": {"type": "disk", "source": "cloud-init:config"}}
	icfg := map[string]cty.Value{
		"name": str(name), "type": str("container"), "image": str(testImage),
		"config":  strMap(map[string]string{"cloud-init.user-data": userData, "user.role": "node"}),
		"devices": devMap(devs),
	}
	is := newStep(t, p, incus.Instance, "talos", icfg)
	iprior := priorOf(is.mustApply(is.mustPlan(nil).Private, nil))

	ds := newStep(t, p, incus.Device, "config_drive_cleared", map[string]cty.Value{
		"instance": str(name), "name": str("cidata"), "ensure": str("absent"),
		"unset_config": cty.ListVal([]cty.Value{str("cloud-init.user-data"), str("cloud-init.vendor-data")}),
	})
	pl := ds.mustPlan(nil)
	wantContains(t, "the plan", pl.Diff, "- detach disk cidata (source cloud-init:config)", "- config cloud-init.user-data removed from the instance (its value is not shown, nor kept)", "rollback: put the device back as it was, not the removed config")
	if strings.Contains(pl.Diff, "vendor-data") || strings.Contains(pl.Diff, "the-cluster-ca-key") {
		t.Fatalf("the plan names a key the instance lacks, or shows the value:\n%s", pl.Diff)
	}
	r := ds.mustApply(pl.Private, nil)
	i := inst(t, c, name)
	if _, ok := i.Config["cloud-init.user-data"]; ok || i.Devices["cidata"] != nil || i.Config["user.role"] != "node" {
		t.Fatalf("after the step the instance has config %v devices %v", i.Config, i.Devices)
	}
	if strings.Contains(r.Revert.Description, "the-cluster-ca-key") || strings.Contains(string(r.Revert.Data), "the-cluster-ca-key") {
		t.Fatalf("the revert data keeps the value: %s %s", r.Revert.Description, r.Revert.Data)
	}
	if rd := ds.read(priorOf(r)); rd.Observation != providers.Present {
		t.Fatalf("the device step reads %v %q", rd.Observation, rd.Detail)
	}
	wantContains(t, "the plan again", ds.mustPlan(priorOf(r)).Diff, "nothing to change")

	// The instance step: drift before the hand-over, none after.
	if rd := is.read(iprior); rd.Observation != providers.Drifted {
		t.Fatalf("before the hand-over the instance reads %v", rd.Observation)
	}
	rebased := p.Read(ctxT(t, 10e9), providers.ReadRequest{Type: incus.Instance, Addr: is.addr, Config: is.cfg, Prior: iprior, Rebase: true})
	if rebased.Diagnostics.HasErrors() || !strings.Contains(string(rebased.Private), `"handed_config":{"cloud-init.user-data":`) || strings.Contains(string(rebased.Private), "the-cluster-ca-key") {
		t.Fatalf("the rebase read: %s %v", rebased.Private, rebased.Diagnostics.Err())
	}
	iprior.Private = rebased.Private
	if rd := is.read(iprior); rd.Observation != providers.Present {
		t.Fatalf("after the hand-over the instance reads %v %q", rd.Observation, rd.Detail)
	}
	ipl := is.mustPlan(iprior)
	wantContains(t, "the instance's plan after the hand-over", ipl.Diff, "nothing to change", "as a later step left it, not drift: config cloud-init.user-data removed, device cidata removed")
	is.mustApply(ipl.Private, iprior)
	if _, ok := inst(t, c, name).Config["cloud-init.user-data"]; ok {
		t.Fatal("applying the instance step again put the key back")
	}

	// A new declaration of the key is planned as usual.
	icfg["config"] = strMap(map[string]string{"cloud-init.user-data": userData + "# changed\n", "user.role": "node"})
	is2 := newStep(t, p, incus.Instance, "talos", icfg)
	wantContains(t, "a changed declaration", is2.mustPlan(iprior).Diff, "+ config cloud-init.user-data")

	// Rollback of the device step: the drive again, not the key.
	ds.revert(r.Revert)
	i = inst(t, c, name)
	if _, ok := i.Config["cloud-init.user-data"]; ok || i.Devices["cidata"]["source"] != "cloud-init:config" {
		t.Fatalf("after rollback the instance has config %v devices %v", i.Config, i.Devices)
	}
}
