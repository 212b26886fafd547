package incus_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
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
	wantContains(t, "the create diff", pl.Diff, `+ create block volume "`+name+`" in pool "default" (the default profile's root disk pool; set pool to choose another)`,
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
	s.revert(updated.Revert)
	if _, _, err := c.StorageVolume(ctxT(t, 10*time.Second), "default", name); !incusapi.IsNotFound(err) {
		t.Fatalf("the volume is still there after rollback: %v", err)
	}
	s.revert(updated.Revert) // again, as a resumed rollback would
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
	if strings.Contains(string(r.Revert.Data), "secret") {
		t.Fatalf("the revert data keeps a sensitive value: %s", r.Revert.Data)
	}
	if v := volume(t, c, name); v.Config["user.role"] != "new" || v.Config["user.added"] != "yes" || v.Config["user.token"] != "new-secret-2" || v.Config["user.keep"] != "me" {
		t.Fatalf("updated volume = %v", v.Config)
	}
	var log strings.Builder
	rv := p.Revert(ctxT(t, 30*time.Second), providers.RevertRequest{Type: incus.Volume, Addr: s.addr, Config: s.cfg, Revert: *r.Revert, Log: &log})
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
	// The pool is checked before the create is sent (TestVolumeMissingPool).
	wantDiag(t, r.Diagnostics, "Unknown Storage Pool", "incus_volume.v", `"no-such-pool-xyz"`)
}

// TestVolumeImport: source_file is imported as an ISO volume (the daemon
// takes any file), its SHA-256 joins the step's inputs and marks the
// volume; a changed file is seen as drift and imported again; rollback
// deletes the volume. A volume the step did not import is not replaced.
func TestVolumeImport(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := unique("iso")
	cleanupVolume(t, c, name)
	file := filepath.Join(t.TempDir(), "talos.iso")
	first := bytes.Repeat([]byte("first image\n"), 1000)
	if err := os.WriteFile(file, first, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]cty.Value{"name": str(name), "source_file": str(file)}
	s := newStep(t, p, incus.Volume, "iso", cfg)
	digest := func() string {
		t.Helper()
		r := p.InputDigest(context.Background(), providers.DigestRequest{Type: incus.Volume, Addr: s.addr, Config: s.cfg})
		if err := r.Diagnostics.Err(); err != nil || r.Digest == "" {
			t.Fatalf("InputDigest = %q %v", r.Digest, err)
		}
		return r.Digest
	}
	d1 := digest()
	pl := s.mustPlan(nil)
	wantContains(t, "the import plan", pl.Diff, "+ import source_file "+file+" (12000 bytes, sha256 ", `as iso volume "`+name+`" in pool "default"`, "rollback: delete the volume")
	created := s.mustApply(pl.Private, nil)
	v := volume(t, c, name)
	if v.ContentType != "iso" || v.Config["size"] != "12000" || !strings.HasPrefix(v.Description, "migrate: imported by incus_volume.iso sha256 ") {
		t.Fatalf("imported volume = %s %v %q", v.ContentType, v.Config, v.Description)
	}
	prior := priorOf(created)
	if r := s.read(prior); r.Observation != providers.Present {
		t.Fatalf("Read after import: %v %s", r.Observation, r.Detail)
	}
	wantContains(t, "the plan after import", s.mustPlan(prior).Diff, "already holds source_file", "nothing to change")

	// A new ISO: another input digest, drift, and a second import.
	if err := os.WriteFile(file, bytes.Repeat([]byte("second image\n"), 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	if d2 := digest(); d2 == d1 {
		t.Fatalf("the input digest did not follow the file: %q", d2)
	}
	if r := s.read(prior); r.Observation != providers.Drifted || !strings.Contains(r.Detail, "does not hold source_file") {
		t.Fatalf("Read after the file changed: %v %s", r.Observation, r.Detail)
	}
	pl = s.mustPlan(prior)
	wantContains(t, "the replace plan", pl.Diff, `~ replace volume "`+name+`"`, "13000 bytes")
	replaced := s.mustApply(pl.Private, prior)
	if v := volume(t, c, name); v.Config["size"] != "13000" {
		t.Fatalf("replaced volume = %v", v.Config)
	}
	s.revert(replaced.Revert)
	if _, _, err := c.StorageVolume(ctxT(t, 10*time.Second), "default", name); !incusapi.IsNotFound(err) {
		t.Fatalf("after rollback the volume is still there: %v", err)
	}

	// A volume of that name migrate did not import is refused, not replaced.
	if err := c.ImportStorageVolume(ctxT(t, 30*time.Second), "default", name, "iso", bytes.NewReader(first)); err != nil {
		t.Fatal(err)
	}
	wantDiag(t, s.plan(nil).Diagnostics, "Volume Exists", "did not import")
}

// TestVolumeImportInvalid: an iso volume needs source_file, and an
// imported one takes neither size nor config; a missing file is named.
func TestVolumeImportInvalid(t *testing.T) {
	t.Parallel()
	p := provider(t, nil)
	file := filepath.Join(t.TempDir(), "x.iso")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg     map[string]cty.Value
		summary string
		detail  string
	}{
		{map[string]cty.Value{"content_type": str("iso")}, "Invalid Attribute Value", `"iso" with source_file`},
		{map[string]cty.Value{"source_file": str(file), "size": str("1GiB")}, "Conflicting Attributes", "remove size and config"},
		{map[string]cty.Value{"source_file": str(file), "content_type": str("block")}, "Invalid Attribute Value", `content_type "block" cannot be imported`},
		{map[string]cty.Value{"source_file": str(file + ".missing")}, "Cannot Read Source File", "x.iso.missing"},
	} {
		wantDiag(t, newStep(t, p, incus.Volume, "bad", tc.cfg).plan(nil).Diagnostics, tc.summary, tc.detail)
	}
}
