package incus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// cleanupVolume deletes a custom volume of the default pool when the test ends.
func cleanupVolume(t testing.TB, c *incusapi.Client, name string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.DeleteStorageVolume(ctx, "default", name); err != nil && !incusapi.IsNotFound(err) {
			t.Logf("cleanup: delete volume %s: %v", name, err)
		}
	})
}

func volume(t testing.TB, c *incusapi.Client, name string) *incusapi.StorageVolume {
	t.Helper()
	v, _, err := c.StorageVolume(ctxT(t, 10*time.Second), "default", name)
	if err != nil {
		t.Fatalf("StorageVolume %s: %v", name, err)
	}
	return v
}

// TestVolumeCreateUpdateRevert: a block volume is created with its size
// and config, found present and unchanged, its size grown, drift seen;
// rollback deletes it.
func TestVolumeCreateUpdateRevert(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := unique("vol")
	cleanupVolume(t, c, name)
	cfg := map[string]cty.Value{
		"name": str(name), "size": str("16MiB"), "content_type": str("block"),
		"config": strMap(map[string]string{"user.purpose": "bulk"}),
	}
	s := newStep(t, p, incus.Volume, "bulk", cfg)
	pl := s.mustPlan(nil)
	wantContains(t, "the create diff", pl.Diff, `+ create block volume "`+name+`" in pool "default"`,
		`+ config size = "16MiB"`, `+ config user.purpose = "bulk"`, "rollback: delete the volume")
	created := s.mustApply(pl.Private, nil)
	v := volume(t, c, name)
	if v.ContentType != "block" || v.Config["size"] != "16MiB" || v.Config["user.purpose"] != "bulk" || v.Config[incus.KeyCreatedBy] != "incus_volume.bulk" {
		t.Fatalf("created volume = %s %v", v.ContentType, v.Config)
	}
	if got := created.Outputs.GetAttr("name").AsString(); got != name || created.Outputs.GetAttr("pool").AsString() != "default" {
		t.Errorf("outputs = %#v", created.Outputs)
	}
	prior := priorOf(created)
	if r := s.read(prior); r.Observation != providers.Present {
		t.Fatalf("Read after create: %v %s", r.Observation, r.Detail)
	}
	wantContains(t, "the plan after create", s.mustPlan(prior).Diff, "nothing to change")

	// Someone changes a managed key: Read says drifted, the plan puts it back.
	put := v.StorageVolumePut
	put.Config["user.purpose"] = "other"
	if err := c.UpdateStorageVolume(ctxT(t, 10*time.Second), "default", name, put, ""); err != nil {
		t.Fatal(err)
	}
	if r := s.read(prior); r.Observation != providers.Drifted || !strings.Contains(r.Detail, `config user.purpose: "other" -> "bulk"`) {
		t.Fatalf("Read after drift: %v %s", r.Observation, r.Detail)
	}

	// The size grows; the step still made the volume, so rollback deletes it.
	cfg["size"] = str("32MiB")
	s = newStep(t, p, incus.Volume, "bulk", cfg)
	pl = s.mustPlan(prior)
	wantContains(t, "the update diff", pl.Diff, `~ config size: "16MiB" -> "32MiB"`, `~ config user.purpose: "other" -> "bulk"`)
	updated := s.mustApply(pl.Private, prior)
	if v := volume(t, c, name); v.Config["size"] != "32MiB" || v.Config["user.purpose"] != "bulk" {
		t.Fatalf("updated volume = %v", v.Config)
	}
	s.revert(updated.Inverse)
	if _, _, err := c.StorageVolume(ctxT(t, 10*time.Second), "default", name); !incusapi.IsNotFound(err) {
		t.Fatalf("the volume is still there after rollback: %v", err)
	}
	s.revert(updated.Inverse) // again, as a resumed rollback would
}

// TestVolumeRestoresConfig: on a volume the step did not create, Apply
// changes only the keys it manages and rollback puts back the previous
// values (a sensitive one cannot be, and says so); the volume stays.
func TestVolumeRestoresConfig(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := unique("vol")
	cleanupVolume(t, c, name)
	if err := c.CreateStorageVolume(ctxT(t, 30*time.Second), "default", incusapi.StorageVolumesPost{Name: name,
		StorageVolumePut: incusapi.StorageVolumePut{Config: map[string]string{"user.keep": "me", "user.role": "old", "user.token": "old-secret-1"}}}); err != nil {
		t.Fatal(err)
	}
	s := newStep(t, p, incus.Volume, name, map[string]cty.Value{
		"config": cty.MapVal(map[string]cty.Value{
			"user.role":  str("new"),
			"user.added": str("yes"),
			"user.token": str("new-secret-2").Mark(phases.SensitiveMark),
		}),
	})
	pl := s.mustPlan(nil)
	wantContains(t, "the update diff", pl.Diff, `~ update volume "`+name+`"`, `+ config user.added = "yes"`,
		`~ config user.role: "old" -> "new"`, "~ config user.token: (sensitive value) -> (sensitive value)")
	if strings.Contains(pl.Diff, "secret") {
		t.Fatalf("the diff shows a sensitive value:\n%s", pl.Diff)
	}
	r := s.mustApply(pl.Private, nil)
	if strings.Contains(string(r.Inverse.Data), "secret") {
		t.Fatalf("the inverse keeps a sensitive value: %s", r.Inverse.Data)
	}
	if v := volume(t, c, name); v.Config["user.role"] != "new" || v.Config["user.added"] != "yes" || v.Config["user.token"] != "new-secret-2" || v.Config["user.keep"] != "me" {
		t.Fatalf("updated volume = %v", v.Config)
	}
	var log strings.Builder
	rv := p.Revert(ctxT(t, 30*time.Second), providers.RevertRequest{Type: incus.Volume, Addr: s.addr, Config: s.cfg, Inverse: *r.Inverse, Log: &log})
	if rv.Diagnostics.HasErrors() || len(rv.Diagnostics) != 1 || rv.Diagnostics[0].Summary != "Sensitive Settings Not Restored" {
		t.Fatalf("Revert: %v", rv.Diagnostics)
	}
	v := volume(t, c, name)
	if _, added := v.Config["user.added"]; added || v.Config["user.role"] != "old" || v.Config["user.keep"] != "me" {
		t.Fatalf("restored volume = %v", v.Config)
	}
}

// TestVolumeValidation: mistakes are diagnostics at plan time.
func TestVolumeValidation(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	fs := unique("vol")
	cleanupVolume(t, c, fs)
	if err := c.CreateStorageVolume(ctxT(t, 30*time.Second), "default", incusapi.StorageVolumesPost{Name: fs}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		cfg     map[string]cty.Value
		summary string
		detail  string
	}{
		{map[string]cty.Value{"content_type": str("iso")}, "Invalid Attribute Value", `"filesystem" or "block"`},
		{map[string]cty.Value{"size": str("1GiB"), "config": strMap(map[string]string{"size": "2GiB"})}, "Conflicting Attributes", "size"},
		{map[string]cty.Value{"config": strMap(map[string]string{incus.KeyCreatedBy: "x"})}, "Reserved Config Key", "user.migrate"},
		{map[string]cty.Value{"name": str(fs), "content_type": str("block")}, "Volume Content Type Differs", "filesystem"},
	}
	for _, tc := range cases {
		wantDiag(t, newStep(t, p, incus.Volume, "v", tc.cfg).plan(nil).Diagnostics, tc.summary, tc.detail)
	}
	r, _ := newStep(t, p, incus.Volume, "v", map[string]cty.Value{"pool": str("no-such-pool-xyz")}).apply(ctxT(t, 30*time.Second), nil, nil)
	wantDiag(t, r.Diagnostics, "Cannot Create Volume", "incus_volume.v", "no-such-pool-xyz")
}
