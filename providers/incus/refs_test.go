package incus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/incus/internal/incustest"
)

// TestMissingHostRefs: a device naming a storage pool, a custom volume or
// a network the host does not have fails the plan, naming it, the device
// and the ones the host has; apply refuses the same
// way before it creates or changes anything.
func TestMissingHostRefs(t *testing.T) {
	c := client(t)
	p := provider(t, nil)
	name := unique("refs")
	cleanupInstance(t, c, name)
	noPool, noVol, noNet, noBridge := unique("nopool"), unique("novol"), unique("nonet"), unique("nobr")
	devices := map[string]map[string]string{
		"root": {"type": "disk", "pool": noPool, "path": "/"},
		"bulk": {"type": "disk", "pool": "default", "source": noVol, "path": "/mnt/bulk"},
		"eth0": {"type": "nic", "network": noNet},
		"eth1": {"type": "nic", "network": incustest.Network}, // exists: not reported
		"lan":  {"type": "nic", "nictype": "bridged", "parent": noBridge},
		"data": {"type": "disk", "source": t.TempDir(), "path": "/var/mnt/data"}, // a host path: not a volume
	}
	cfg := map[string]cty.Value{"name": str(name), "type": str("container"), "image": str(testImage), "devices": devMap(devices)}
	s := newStep(t, p, incus.Instance, "talos", cfg)
	check := func(what string, d interface{ Err() error }) {
		t.Helper()
		if d.Err() == nil {
			t.Fatalf("%s: no error", what)
		}
	}

	pl := s.plan(nil)
	check("the plan", pl.Diagnostics)
	if n := len(pl.Diagnostics); n != 4 {
		t.Errorf("the plan has %d diagnostics, want 4 (pool, volume, network, parent): %v", n, pl.Diagnostics)
	}
	poolDetail := []string{`The storage pool "` + noPool + `" named by device root of incus_instance.talos (pool = "` + noPool + `") does not exist on Incus at`, "Nothing was changed."}
	volDetail := []string{`The custom storage volume "` + noVol + `" of pool "default" named by device bulk of incus_instance.talos (source = "` + noVol + `")`, "source = incus_volume.NAME.name"}
	netDetail := []string{`The network "` + noNet + `" named by device eth0 of incus_instance.talos (network = "` + noNet + `")`}
	parentDetail := []string{`The network "` + noBridge + `" named by device lan of incus_instance.talos (parent = "` + noBridge + `")`, "Set parent"}
	poolDetail = append(poolDetail, "the host has: default.")
	netDetail = append(netDetail, "the host has: "+incustest.Network+".") // managed ones only
	parentDetail = append(parentDetail, "lo", incustest.Network)
	wantDiag(t, pl.Diagnostics, "Unknown Storage Pool", poolDetail...)
	wantDiag(t, pl.Diagnostics, "Unknown Storage Volume", volDetail...)
	wantDiag(t, pl.Diagnostics, "Unknown Network", netDetail...)
	for _, d := range pl.Diagnostics {
		if d.Summary == "Unknown Network" && d.Detail != "" && strings.Contains(d.Detail, `"`+incustest.Network+`" named`) {
			t.Errorf("an existing network reported missing: %s", d.Detail)
		}
	}
	found := false
	for _, d := range pl.Diagnostics {
		found = found || d.Summary == "Unknown Network" && strings.Contains(d.Detail, parentDetail[0])
	}
	if !found {
		t.Errorf("no diagnostic for the bridged NIC's parent: %v", pl.Diagnostics)
	}

	// Apply (the plan may be stale) refuses the same way: nothing created.
	r, log := s.apply(ctxT(t, 60*time.Second), nil, nil)
	check("the apply", r.Diagnostics)
	wantDiag(t, r.Diagnostics, "Unknown Storage Pool", poolDetail...)
	if _, _, err := c.Instance(ctxT(t, 10*time.Second), name); !incusapi.IsNotFound(err) {
		t.Fatalf("after the refused apply, instance %s: %v (log %s)", name, err, log)
	}

	// An existing instance: a device added that names a missing network is
	// refused by plan and apply; the instance keeps its devices.
	cfg = map[string]cty.Value{"name": str(name), "type": str("container"), "image": str(testImage)}
	s = newStep(t, p, incus.Instance, "talos", cfg)
	created := s.mustApply(s.mustPlan(nil).Private, nil)
	cfg["devices"] = devMap(map[string]map[string]string{"eth0": {"type": "nic", "network": noNet}})
	s = newStep(t, p, incus.Instance, "talos", cfg)
	pl = s.plan(priorOf(created))
	wantDiag(t, pl.Diagnostics, "Unknown Network", netDetail...)
	r, _ = s.apply(ctxT(t, 60*time.Second), nil, priorOf(created))
	wantDiag(t, r.Diagnostics, "Unknown Network", netDetail...)
	if devs := inst(t, c, name).Devices; len(devs) != 0 {
		t.Errorf("after the refused update, devices = %v", devs)
	}

	// What exists passes: the pool, a volume made meanwhile, the network.
	vol := unique("vol")
	if err := c.CreateStorageVolume(ctxT(t, 30*time.Second), "default", incusapi.StorageVolumesPost{Name: vol}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteStorageVolume(context.Background(), "default", vol) })
	cfg["devices"] = devMap(map[string]map[string]string{
		"bulk": {"type": "disk", "pool": "default", "source": vol, "path": "/mnt/bulk"},
		"eth0": {"type": "nic", "network": incustest.Network},
	})
	s = newStep(t, p, incus.Instance, "talos", cfg)
	wantContains(t, "the plan with what exists", s.mustPlan(priorOf(created)).Diff, "+ device bulk", "+ device eth0")
}

// TestVolumeMissingPool: an incus_volume in a pool the host does not have
// fails the plan and the apply, naming the pool; nothing is created.
func TestVolumeMissingPool(t *testing.T) {
	c := client(t)
	p := provider(t, nil)
	noPool := unique("nopool")
	s := newStep(t, p, incus.Volume, "bulk", map[string]cty.Value{"pool": str(noPool), "size": str("8MiB")})
	want := []string{`The storage pool "` + noPool + `" named by the pool attribute of incus_volume.bulk does not exist on Incus at`, "the host has: default."}
	wantDiag(t, s.plan(nil).Diagnostics, "Unknown Storage Pool", want...)
	r, _ := s.apply(ctxT(t, 60*time.Second), nil, nil)
	wantDiag(t, r.Diagnostics, "Unknown Storage Pool", want...)
	if _, err := c.StoragePool(ctxT(t, 10*time.Second), noPool); !incusapi.IsNotFound(err) {
		t.Errorf("pool %s: %v", noPool, err)
	}
}

// TestVolumeMadeInTheSameRun: an instance whose disk refers to the outputs
// of the incus_volume step that makes the volume plans (deferred: the
// volume is not there yet) and runs; named by a plain string instead, the
// volume is not known to be made by the run, and the plan is refused,
// saying to refer to the step's outputs. Nothing is created then.
func TestVolumeMadeInTheSameRun(t *testing.T) {
	c := client(t)
	vol, name := unique("bulk"), unique("node")
	t.Cleanup(func() { _ = c.DeleteStorageVolume(context.Background(), "default", vol) })
	cleanupInstance(t, c, name) // runs first: the volume is in use until then
	vars := []string{"volume=" + vol, "instance=" + name, "image=" + testImage}

	e, done := migration(t, loadRunbook(t, "testdata/refs", append(vars, "source_by_name=true")...), t.TempDir())
	_, diags := e.Plan(context.Background(), engine.PlanOptions{Phases: []string{"build"}})
	done()
	wantDiag(t, diags, "Unknown Storage Volume", `"`+vol+`"`, "device bulk of incus_instance.node", "source = incus_volume.NAME.name")
	if _, _, err := c.StorageVolume(ctxT(t, 10*time.Second), "default", vol); !incusapi.IsNotFound(err) {
		t.Fatalf("after the refused plan, volume %s: %v", vol, err)
	}

	plan, err := runPhase(t, loadRunbook(t, "testdata/refs", vars...), t.TempDir(), "build")
	if err != nil {
		t.Fatalf("run build: %v", err)
	}
	for _, sp := range plan.Phases[0].Steps {
		if sp.Addr.String() == "incus_instance.node" && !sp.Deferred {
			t.Errorf("the instance's plan was not deferred: %s", sp.Diff)
		}
	}
	if d := inst(t, c, name).Devices["bulk"]; d["source"] != vol || d["pool"] != "default" {
		t.Errorf("device bulk = %v", d)
	}
}

// TestPoolFix: on an IncusOS host, whose default pool is "local", a step
// written for pool "default" is told to use "local".
func TestPoolFix(t *testing.T) {
	for _, tc := range []struct {
		missing string
		has     []string
		want    string
	}{
		{"default", []string{"data", "local"}, `Set pool = "local" (IncusOS calls its default pool "local")`},
		{"default", []string{"data"}, "Set pool to one of those"},
		{"tank", []string{"local"}, "Set pool to one of those"},
		{"tank", nil, "Create the pool"},
	} {
		if got := incus.PoolFix(tc.missing, tc.has); !strings.Contains(got, tc.want) {
			t.Errorf("PoolFix(%q, %v) = %q, want %q", tc.missing, tc.has, got, tc.want)
		}
	}
}
