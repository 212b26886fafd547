package incus_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// TestInstanceLifecycle: create, idempotent re-plan, update with a diff,
// drift, restore of the previous settings, delete on rollback.
func TestInstanceLifecycle(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := unique("inst")
	cleanupInstance(t, c, name)
	share := t.TempDir()
	cfg := map[string]cty.Value{
		"name":     str(name),
		"type":     str("container"),
		"image":    str(testImage),
		"memory":   str("256MiB"),
		"cpu":      cty.NumberIntVal(1),
		"profiles": cty.ListVal([]cty.Value{str("default")}),
		"config":   strMap(map[string]string{"user.role": "old-home"}),
		"devices":  devMap(map[string]map[string]string{"data": {"type": "disk", "source": share, "path": "/var/mnt/data"}}),
		"start":    cty.True,
	}
	s := newStep(t, p, incus.Instance, "talos", cfg)

	pl := s.mustPlan(nil)
	wantContains(t, "the create diff", pl.Diff,
		`+ create container "`+name+`" from image "`+testImage+`", then start it`,
		`+ config limits.cpu = "1"`, `+ config limits.memory = "256MiB"`, `+ config user.role = "old-home"`,
		`+ device data {path="/var/mnt/data", source="`+share+`", type="disk"}`, "+ profiles [default]", "rollback: delete the instance")
	created := s.mustApply(pl.Private, nil)
	if created.Revert == nil || !strings.Contains(created.Revert.Description, "delete instance "+name) {
		t.Fatalf("revertOf = %+v", created.Revert)
	}
	i := inst(t, c, name)
	if i.Status != "Running" || i.Config["limits.memory"] != "256MiB" || i.Config[incus.KeyCreatedBy] != "incus_instance.talos" || i.Devices["data"]["path"] != "/var/mnt/data" {
		t.Fatalf("created instance = %s %v %v", i.Status, i.Config, i.Devices)
	}
	if got := created.Outputs.GetAttr("name").AsString(); got != name {
		t.Errorf("output name = %q", got)
	}

	// Its identity is the instance's own UUID, not its name.
	if want := "instance " + name + " " + i.Config["volatile.uuid"]; i.Config["volatile.uuid"] == "" || created.Identity != want {
		t.Errorf("identity = %q, want %q", created.Identity, want)
	}

	// Idempotent: Read says present, the plan changes nothing.
	prior := priorOf(created)
	if r := s.read(prior); r.Observation != providers.Present || r.Identity != created.Identity {
		t.Fatalf("Read after create: %v %s, identity %q", r.Observation, r.Detail, r.Identity)
	}
	wantContains(t, "the re-plan", s.mustPlan(prior).Diff, "nothing to change")

	// Someone changes a managed key by hand: drift.
	put := i.Put()
	put.Config["limits.memory"] = "300MiB"
	if err := c.UpdateInstance(ctxT(t, 30*time.Second), name, put, ""); err != nil {
		t.Fatal(err)
	}
	r := s.read(prior)
	if r.Observation != providers.Drifted {
		t.Fatalf("Read after a hand edit: %v", r.Observation)
	}
	wantContains(t, "the drift detail", r.Detail, `~ config limits.memory: "300MiB" -> "256MiB"`)

	// An update: one key changed, one added, one dropped from the runbook,
	// a device added; the diff is sorted and the update uses the plan's ETag.
	cfg["config"] = strMap(map[string]string{"user.note": "migrating"})
	cfg["devices"] = devMap(map[string]map[string]string{
		"data": {"type": "disk", "source": share, "path": "/var/mnt/data"},
		"tmp":  {"type": "disk", "source": t.TempDir(), "path": "/mnt/tmp"},
	})
	s = newStep(t, p, incus.Instance, "talos", cfg)
	pl = s.mustPlan(prior)
	want := `~ update container "` + name + `" (running) with the ETag read now; a change made meanwhile is refused, not overwritten
  ~ config limits.memory: "300MiB" -> "256MiB"
  + config user.note = "migrating"
  - config user.role (was "old-home")
  + device tmp {path="/mnt/tmp", source="`
	if !strings.HasPrefix(pl.Diff, want) {
		t.Errorf("update diff:\n%s\nwant a prefix of:\n%s", pl.Diff, want)
	}
	updated := s.mustApply(pl.Private, prior)
	i = inst(t, c, name)
	if i.Config["user.note"] != "migrating" || i.Config["user.role"] != "" || i.Config["limits.memory"] != "256MiB" || i.Devices["tmp"] == nil {
		t.Fatalf("updated instance config %v devices %v", i.Config, i.Devices)
	}
	// A step that created the instance is undone by deleting it.
	if updated.Revert == nil || !strings.Contains(string(updated.Revert.Data), `"delete"`) {
		t.Errorf("revert data of an update of an instance the step created = %+v", updated.Revert)
	}
	if r := s.read(priorOf(updated)); r.Observation != providers.Present || r.Identity != created.Identity {
		t.Errorf("Read after update: %v %s, identity %q (an update keeps the instance)", r.Observation, r.Detail, r.Identity)
	}

	s.revert(updated.Revert)
	if _, _, err := c.Instance(ctxT(t, 10*time.Second), name); !incusapi.IsNotFound(err) {
		t.Fatalf("after rollback the instance still exists (%v)", err)
	}
	if r := s.read(priorOf(updated)); r.Observation != providers.Absent {
		t.Errorf("Read after rollback: %v", r.Observation)
	}
	// Made again under the same name, it is another instance.
	again := s.mustApply(s.mustPlan(nil).Private, nil)
	if again.Identity == "" || again.Identity == created.Identity {
		t.Errorf("the instance made again has identity %q, the first had %q", again.Identity, created.Identity)
	}
	s.revert(again.Revert)
}

// TestInstanceUpdateRestore: a step that adopts an existing instance (an
// old VM) changes it, and rollback restores the previous config and
// devices exactly.
func TestInstanceUpdateRestore(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := launch(t, c, "restore", false, map[string]string{"user.keep": "1", "limits.memory": "128MiB"})
	before := inst(t, c, name)
	s := newStep(t, p, incus.Instance, "old", map[string]cty.Value{
		"name":   str(name),
		"type":   str("container"),
		"memory": str("512MiB"),
		"config": strMap(map[string]string{"user.secret": "hunter2-token"}).Mark("sensitive"),
	})
	pl := s.mustPlan(nil)
	wantContains(t, "the update diff", pl.Diff, `~ config limits.memory: "128MiB" -> "512MiB"`, `+ config user.secret = (sensitive value)`)
	if strings.Contains(pl.Diff, "hunter2") {
		t.Fatalf("the diff shows a sensitive value:\n%s", pl.Diff)
	}
	r := s.mustApply(pl.Private, nil)
	if strings.Contains(string(r.Revert.Data), "hunter2") || strings.Contains(r.Revert.Description, "hunter2") {
		t.Fatalf("the revert data shows a sensitive value: %s", r.Revert.Data)
	}
	if got := inst(t, c, name).Config["user.secret"]; got != "hunter2-token" {
		t.Fatalf("user.secret = %q", got)
	}
	rv := s.revert(r.Revert)
	after := inst(t, c, name)
	if after.Config["limits.memory"] != "128MiB" || after.Config["user.keep"] != "1" {
		t.Errorf("restored config = %v, want %v", after.Config, before.Config)
	}
	// A new key whose value was sensitive did not exist before: removing
	// it needs no secret.
	if _, ok := after.Config["user.secret"]; ok {
		t.Errorf("user.secret survived the rollback")
	}
	if rv.Diagnostics.HasErrors() {
		t.Error(rv.Diagnostics.Err())
	}
}

// TestInstanceETagConflict: a change made between plan and apply is
// detected, and not overwritten.
func TestInstanceETagConflict(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := launch(t, c, "etag", false, nil)
	s := newStep(t, p, incus.Instance, "etag", map[string]cty.Value{
		"name": str(name), "type": str("container"), "config": strMap(map[string]string{"user.a": "planned"}),
	})
	pl := s.mustPlan(nil)
	var priv struct {
		ETag string `json:"etag"`
	}
	if err := json.Unmarshal(pl.Private, &priv); err != nil || priv.ETag == "" {
		t.Fatalf("the plan kept no ETag: %s", pl.Private)
	}
	i := inst(t, c, name)
	put := i.Put()
	put.Config["user.b"] = "someone else"
	if err := c.UpdateInstance(ctxT(t, 30*time.Second), name, put, ""); err != nil {
		t.Fatal(err)
	}
	r, log := s.apply(ctxT(t, 30*time.Second), pl.Private, nil)
	wantDiag(t, r.Diagnostics, "Concurrent Change", "changed after the plan read it", "Make a new plan")
	after := inst(t, c, name)
	if after.Config["user.b"] != "someone else" || after.Config["user.a"] != "" {
		t.Errorf("after the refused apply: %v (log %s)", after.Config, log)
	}
	// A new plan sees both and applies.
	pl = s.mustPlan(nil)
	s.mustApply(pl.Private, nil)
	if after := inst(t, c, name); after.Config["user.b"] != "someone else" || after.Config["user.a"] != "planned" {
		t.Errorf("after a new plan: %v", after.Config)
	}
}

// TestCleanupGuard: deleting an instance kept for rollback is refused at
// plan time unless retain_until has passed.
func TestCleanupGuard(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := launch(t, c, "guard", false, map[string]string{
		incus.KeyKeepForRollback: "true", incus.KeyStoppedAt: "2026-11-30T10:00:00Z", incus.KeyStoppedBy: "incus_instance_state.old-home",
	})
	absent := func(retain string) *step {
		cfg := map[string]cty.Value{"name": str(name), "ensure": str("absent"), "type": str("container")}
		if retain != "" {
			cfg["retain_until"] = str(retain)
		}
		return newStep(t, p, incus.Instance, "delete-old", cfg)
	}
	r := absent("").plan(nil)
	wantDiag(t, r.Diagnostics, "Instance Kept For Rollback", name, "2026-11-30T10:00:00Z", "incus_instance_state.old-home", `retain_until = "YYYY-MM-DD"`, "migrate rollback")
	r = absent("2999-01-31").plan(nil)
	wantDiag(t, r.Diagnostics, "Instance Retained Until 2999-01-31", `retain_until = "2999-01-31"`, "from 2999-02-01", time.Now().Format("2006-01-02"))
	if a, _ := absent("2999-01-31").apply(ctxT(t, 30*time.Second), nil, nil); !a.Diagnostics.HasErrors() {
		t.Fatal("Apply deleted an instance retained until 2999")
	}
	r = absent("bad-date").plan(nil)
	wantDiag(t, r.Diagnostics, "Invalid Attribute Value", "YYYY-MM-DD")

	s := absent("2000-01-01")
	pl := s.mustPlan(nil)
	wantContains(t, "the delete diff", pl.Diff, `- delete container "`+name+`"`, "retain_until 2000-01-01 has passed", "irreversible")
	wantContains(t, "the plan's irreversible reason", pl.Irreversible, "cannot be brought back")
	done := s.mustApply(pl.Private, nil)
	if done.Revert != nil {
		t.Errorf("a deletion returned revert data: %+v", done.Revert)
	}
	if _, _, err := c.Instance(ctxT(t, 10*time.Second), name); !incusapi.IsNotFound(err) {
		t.Fatalf("the instance was not deleted: %v", err)
	}
	if rr := s.read(priorOf(done)); rr.Observation != providers.Present {
		t.Errorf("Read of a done deletion: %v", rr.Observation)
	}
	wantContains(t, "the re-plan", s.mustPlan(nil).Diff, "already absent")

	// An unmarked instance may go without a date.
	plain := launch(t, c, "plain", true, nil)
	s = newStep(t, p, incus.Instance, "delete-plain", map[string]cty.Value{"name": str(plain), "ensure": str("absent"), "type": str("container")})
	wantContains(t, "the delete diff", s.mustPlan(nil).Diff, "stopped by force first")
	s.mustApply(nil, nil)
}

// TestOperationFailure: failures reported only by the operation (HTTP 200
// from /wait with an error body) reach the diagnostics with the daemon's
// words: a create whose device is invalid, and a start that fails.
func TestOperationFailure(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := unique("opfail")
	cleanupInstance(t, c, name)
	s := newStep(t, p, incus.Instance, "broken", map[string]cty.Value{
		"name": str(name), "type": str("container"), "image": str(testImage), "start": cty.True,
		"devices": devMap(map[string]map[string]string{"data": {"type": "disk", "source": "/nonexistent/migrate-test", "path": "/mnt/x"}}),
	})
	r, _ := s.apply(ctxT(t, 60*time.Second), nil, nil)
	wantDiag(t, r.Diagnostics, "Cannot Create Instance", "incus_instance.broken", "operation", `Missing source path "/nonexistent/migrate-test"`)

	// A start that fails: the shared directory vanished after creation.
	dir := t.TempDir() + "/share"
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old := launch(t, c, "nostart", false, nil)
	i := inst(t, c, old)
	put := i.Put()
	put.Devices = map[string]map[string]string{"data": {"type": "disk", "source": dir, "path": "/mnt/x"}}
	if err := c.UpdateInstance(ctxT(t, 30*time.Second), old, put, ""); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	st := newStep(t, p, incus.InstanceState, "revive", map[string]cty.Value{"instance": str(old), "state": str("running")})
	r, _ = st.apply(ctxT(t, 60*time.Second), nil, nil)
	wantDiag(t, r.Diagnostics, "Cannot Start Instance", "incus_instance_state.revive", "operation", "start")
	t.Logf("start failure: %v", r.Diagnostics.Err())

	// An image that does not exist: a plain API error, clearly worded.
	s = newStep(t, p, incus.Instance, "noimage", map[string]cty.Value{"name": str(unique("noimg")), "type": str("container"), "image": str("no-such-image-xyz")})
	r, _ = s.apply(ctxT(t, 60*time.Second), nil, nil)
	wantDiag(t, r.Diagnostics, "Cannot Create Instance", "no-such-image-xyz")
}

// TestValidation: mistakes are diagnostics at plan time.
func TestValidation(t *testing.T) {
	t.Parallel()
	p := provider(t, nil)
	cases := []struct {
		cfg     map[string]cty.Value
		summary string
		detail  string
	}{
		{map[string]cty.Value{"type": str("lxc")}, "Invalid Attribute Value", `"virtual-machine" or "container"`},
		{map[string]cty.Value{"type": str("container"), "empty": cty.True}, "Invalid Attribute Value", "empty = true is for virtual machines"},
		{map[string]cty.Value{"image": str("x"), "empty": cty.True}, "Conflicting Attributes", "image and empty"},
		{map[string]cty.Value{"cpu": cty.NumberIntVal(2), "config": strMap(map[string]string{"limits.cpu": "3"})}, "Conflicting Attributes", "cpu"},
		{map[string]cty.Value{"devices": devMap(map[string]map[string]string{"gpu": {"pci": "0000:00:02.0"}})}, "Invalid Device", "no type"},
		{map[string]cty.Value{"devices": devMap(map[string]map[string]string{"bulk": {"type": "disk", "pool": "default", "source": "bulk", "size": "150GiB"}})}, "Invalid Device", "Only the root disk may have a size quota"},
		{map[string]cty.Value{"name": str("9bad_name")}, "Invalid Instance Name", "9bad_name"},
		{map[string]cty.Value{"config": strMap(map[string]string{incus.KeyKeepForRollback: "false"})}, "Reserved Config Key", "user.migrate"},
		{map[string]cty.Value{"name": str(unique("new")), "type": str("container")}, "Missing Attribute", "image"},
	}
	for _, tc := range cases {
		r := newStep(t, p, incus.Instance, "v", tc.cfg).plan(nil)
		wantDiag(t, r.Diagnostics, tc.summary, tc.detail)
	}
}
