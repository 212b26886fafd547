package incus_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// TestInstanceStateLifecycle: stop an old VM with a snapshot before and
// keep_for_rollback; re-runs change nothing; rollback restores the
// snapshot and starts it again.
func TestInstanceStateLifecycle(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := launch(t, c, "oldvm", true, map[string]string{"user.app": "jellyfin"})
	s := newStep(t, p, incus.InstanceState, "old_home", map[string]cty.Value{
		"instance": str(name), "state": str("stopped"), "snapshot_before": cty.True,
		"restore_on_rollback": cty.True, "force_after": cty.True, "stop_timeout": str("20s"),
	})
	pl := s.mustPlan(nil)
	wantContains(t, "the stop diff", pl.Diff,
		`~ stop instance "`+name+`" (running -> stopped): gracefully within 20s, then by force`,
		"+ snapshot migrate-old_home-", `+ config user.migrate.keep_for_rollback = "true"`,
		"rollback: restore the snapshot, then start it again",
		`~ config boot.autostart = "false" (was unset: a reboot of the host must not start it again; rollback puts it back)`)
	r := s.mustApply(pl.Private, nil)
	i := inst(t, c, name)
	if i.Status != "Stopped" {
		t.Fatalf("status after stop = %s", i.Status)
	}
	if i.Config["boot.autostart"] != "false" || i.Config[incus.KeyAutostartBefore] != "unset" {
		t.Errorf("a stopped old VM would start again at the host's next boot: boot.autostart %q, kept as %q", i.Config["boot.autostart"], i.Config[incus.KeyAutostartBefore])
	}
	snap := r.Outputs.GetAttr("snapshot").AsString()
	if !strings.HasPrefix(snap, "migrate-old_home-") || !slices.Contains(snapshots(t, c, name), snap) {
		t.Fatalf("snapshot output %q, snapshots %v", snap, snapshots(t, c, name))
	}
	if got := r.Outputs.GetAttr("previous_state").AsString(); got != "running" {
		t.Errorf("previous_state = %q", got)
	}
	if i.Config[incus.KeyKeepForRollback] != "true" || i.Config[incus.KeyStoppedBy] != "incus_instance_state.old_home" || i.Config[incus.KeySnapshot] != snap {
		t.Errorf("marks = %v", i.Config)
	}
	if _, err := time.Parse(time.RFC3339, i.Config[incus.KeyStoppedAt]); err != nil {
		t.Errorf("stopped_at = %q", i.Config[incus.KeyStoppedAt])
	}
	wantContains(t, "the revert data", r.Revert.Description, "restore snapshot "+snap, "start it again")

	// Idempotent: Read present; the plan and a second apply do nothing.
	prior := priorOf(r)
	if rr := s.read(prior); rr.Observation != providers.Present {
		t.Fatalf("Read after stop: %v", rr.Observation)
	}
	wantContains(t, "the re-plan", s.mustPlan(prior).Diff, "already stopped: nothing to do")
	again := s.mustApply(nil, prior)
	if n := len(snapshots(t, c, name)); n != 1 {
		t.Errorf("a second apply took another snapshot: %d", n)
	}
	if again.Revert == nil || !strings.Contains(again.Revert.Description, "start it again") {
		t.Errorf("the second apply lost the way back: %+v", again.Revert)
	}

	// Something changes while it is stopped; rollback restores the snapshot.
	put := i.Put()
	put.Config["user.app"] = "changed during the migration"
	if err := c.UpdateInstance(ctxT(t, 30*time.Second), name, put, ""); err != nil {
		t.Fatal(err)
	}
	s.revert(r.Revert)
	i = inst(t, c, name)
	if i.Status != "Running" {
		t.Fatalf("status after rollback = %s", i.Status)
	}
	if i.Config["user.app"] != "jellyfin" {
		t.Errorf("the snapshot was not restored: user.app = %q", i.Config["user.app"])
	}
	for _, k := range []string{incus.KeyKeepForRollback, incus.KeyStoppedAt, incus.KeyStoppedBy, incus.KeySnapshot, incus.KeyAutostartBefore, "boot.autostart"} {
		if v, ok := i.Config[k]; ok {
			t.Errorf("%s = %q after rollback", k, v)
		}
	}
	if rr := s.read(prior); rr.Observation != providers.Drifted {
		t.Errorf("Read after rollback: %v", rr.Observation)
	}
}

// TestStartAndStopAgain: state = "running" on a stopped instance; its
// rollback stops it again and puts the keep marks back.
func TestStartAndStopAgain(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := launch(t, c, "revive", false, map[string]string{incus.KeyKeepForRollback: "true", incus.KeyStoppedBy: "incus_instance_state.x"})
	s := newStep(t, p, incus.InstanceState, "revive", map[string]cty.Value{"instance": str(name), "state": str("running")})
	wantContains(t, "the start diff", s.mustPlan(nil).Diff, "~ start instance", "rollback: stop it again")
	r := s.mustApply(nil, nil)
	if i := inst(t, c, name); i.Status != "Running" || i.Config[incus.KeyKeepForRollback] != "" {
		t.Fatalf("after start: %s %v", i.Status, i.Config)
	}
	// The rollback stops it gracefully, as it would a VM that has run
	// since: the guest's init must be up to hear the signal.
	waitInit(t, c, name)
	s.revert(r.Revert)
	if i := inst(t, c, name); i.Status != "Stopped" || i.Config[incus.KeyKeepForRollback] != "true" {
		t.Fatalf("after rollback: %s %v", i.Status, i.Config)
	}
}

// TestStopKeepsAutostartOff: an old VM set to start with the host is
// stopped with boot.autostart false (resumed, the value from before the
// first attempt is kept), started again with it, and the start's own
// rollback turns it off again.
func TestStopKeepsAutostartOff(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := launch(t, c, "autostart", true, map[string]string{"boot.autostart": "true"})
	s := newStep(t, p, incus.InstanceState, "autostart", map[string]cty.Value{"instance": str(name), "state": str("stopped"), "force_after": cty.True})
	wantContains(t, "the stop diff", s.mustPlan(nil).Diff, `~ config boot.autostart = "false" (was "true"`)
	r := s.mustApply(nil, nil)
	if i := inst(t, c, name); i.Config["boot.autostart"] != "false" || i.Config[incus.KeyAutostartBefore] != "true" {
		t.Fatalf("after the stop: %v", i.Config)
	}
	wantContains(t, "the revert data", r.Revert.Description, `boot.autostart = "true" again`)
	if again := s.mustApply(nil, nil); again.Revert == nil || !strings.Contains(again.Revert.Description, `boot.autostart = "true" again`) {
		t.Errorf("applied again, the step forgot boot.autostart was true: %+v", again.Revert)
	}

	start := newStep(t, p, incus.InstanceState, "autostart_back", map[string]cty.Value{"instance": str(name), "state": str("running")})
	up := start.mustApply(nil, nil)
	if i := inst(t, c, name); i.Status != "Running" || i.Config["boot.autostart"] != "true" || i.Config[incus.KeyAutostartBefore] != "" {
		t.Fatalf("started again: %s %v", i.Status, i.Config)
	}
	waitInit(t, c, name) // the rollback's stop is graceful (no force_after)
	start.revert(up.Revert)
	if i := inst(t, c, name); i.Status != "Stopped" || i.Config["boot.autostart"] != "false" || i.Config[incus.KeyAutostartBefore] != "true" {
		t.Fatalf("the start rolled back: %s %v", i.Status, i.Config)
	}
	s.revert(r.Revert)
	if i := inst(t, c, name); i.Status != "Running" || i.Config["boot.autostart"] != "true" {
		t.Fatalf("the stop rolled back: %s %v", i.Status, i.Config)
	}
}

// TestGracefulStopTimeout: a guest that ignores the shutdown signal makes
// the step fail with advice, unless force_after is set.
func TestGracefulStopTimeout(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := launch(t, c, "stubborn", true, slowStop)
	cfg := map[string]cty.Value{"instance": str(name), "state": str("stopped"), "stop_timeout": str("1s")}
	s := newStep(t, p, incus.InstanceState, "stubborn", cfg)
	wantContains(t, "the diff", s.mustPlan(nil).Diff, "no force: force_after is not set")
	r, _ := s.apply(ctxT(t, 60*time.Second), nil, nil)
	wantDiag(t, r.Diagnostics, "Graceful Stop Timed Out", name, "1s", "force_after = true", "still running")
	if i := inst(t, c, name); i.Status != "Running" {
		t.Fatalf("status after a timed-out graceful stop = %s", i.Status)
	}
	cfg["force_after"] = cty.True
	s = newStep(t, p, incus.InstanceState, "stubborn", cfg)
	start := time.Now()
	done := s.mustApply(nil, nil)
	if i := inst(t, c, name); i.Status != "Stopped" {
		t.Fatalf("status after force_after = %s", i.Status)
	}
	t.Logf("graceful (1s timeout) then forced stop: %s", time.Since(start))
	s.revert(done.Revert)
	if i := inst(t, c, name); i.Status != "Running" {
		t.Errorf("status after rollback = %s", i.Status)
	}
}

// TestStopWaitsForTheDaemonsStopHandling: the daemon's own stop handling
// (its post-stop hook) runs late, as it did on a busy CI host, where
// TestRunbookRunAndRollback found an old VM Running after a retire that
// said it was stopped. The guest stops at once, yet the graceful stop times
// out (the daemon waits for its hook); the forced stop is answered
// "container is not running", and the status reads Stopped while the daemon
// has not recorded the stop (volatile.last_state.power RUNNING), then
// Running while it handles it. The step ends only once the daemon is done.
// The delay: raw.lxc replaces the daemon's post-stop hook (read from the
// liblxc config it wrote) by an 8 s sleep, then the same hook.
func TestStopWaitsForTheDaemonsStopHandling(t *testing.T) {
	t.Parallel()
	c := client(t)
	if isLab {
		t.Skip("the lab's host runs no liblxc hooks")
	}
	p := provider(t, nil)
	name := launch(t, c, "latehook", true, nil)
	conf, err := os.ReadFile("/run/incus/" + name + "/lxc.conf")
	if err != nil {
		t.Skipf("the daemon's liblxc config of %s cannot be read here: %v", name, err)
	}
	var hook string
	for _, line := range strings.Split(string(conf), "\n") {
		if v, ok := strings.CutPrefix(line, "lxc.hook.post-stop = "); ok {
			hook = v
		}
	}
	if hook == "" || strings.Contains(hook, "'") {
		t.Fatalf("no usable post-stop hook in the liblxc config of %s:\n%s", name, conf)
	}
	if err := c.SetState(ctxT(t, 60*time.Second), name, incusapi.InstanceStatePut{Action: "stop", Force: true}); err != nil {
		t.Fatal(err)
	}
	i := inst(t, c, name)
	put := i.Put()
	put.Config["raw.lxc"] = "lxc.hook.post-stop =\nlxc.hook.post-stop = /bin/sh -c 'sleep 8; exec " + hook + "'"
	if err := c.UpdateInstance(ctxT(t, 30*time.Second), name, put, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.SetState(ctxT(t, 60*time.Second), name, incusapi.InstanceStatePut{Action: "start"}); err != nil {
		t.Fatal(err)
	}
	waitInit(t, c, name)

	s := newStep(t, p, incus.InstanceState, "late", map[string]cty.Value{
		"instance": str(name), "state": str("stopped"), "stop_timeout": str("2s"), "force_after": cty.True,
	})
	start := time.Now()
	r, log := s.apply(ctxT(t, 2*time.Minute), nil, nil)
	took := time.Since(start)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\nlog:\n%s", err, log)
	}
	t.Logf("Apply log:\n%s", log)
	i = inst(t, c, name)
	if i.Status != "Stopped" || i.Config["volatile.last_state.power"] != "STOPPED" {
		t.Fatalf("the step ended after %s with the instance %s, volatile.last_state.power %s: the daemon has not finished the stop",
			took.Round(time.Millisecond), i.Status, i.Config["volatile.last_state.power"])
	}
	wantContains(t, "the log", log, "forcing it off (force_after)", "stopped as the daemon has it")
	t.Logf("stopped (the daemon's post-stop hook 8s late) in %s", took.Round(time.Millisecond))
}

// TestStopInterruptedThenResumed: the run is cancelled in the middle of a
// long graceful stop; a new provider's Read sees it not done, and the
// re-apply converges (the mark from the first attempt is recognised, the
// snapshot reused).
func TestStopInterruptedThenResumed(t *testing.T) {
	t.Parallel()
	c := client(t)
	name := launch(t, c, "cancel", true, slowStop)
	cfg := map[string]cty.Value{"instance": str(name), "state": str("stopped"), "stop_timeout": str("2s"), "force_after": cty.True, "snapshot_before": cty.True}
	s := newStep(t, provider(t, nil), incus.InstanceState, "old-matrix", cfg)
	s.cfg = obj(map[string]cty.Value{"instance": str(name), "state": str("stopped"), "stop_timeout": str("10m"), "snapshot_before": cty.True})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		// Cancel once the stop is under way: the marks are set just before.
		for ctx.Err() == nil {
			if i, _, err := c.Instance(context.Background(), name); err == nil && i.Config[incus.KeyStoppedBy] != "" {
				time.Sleep(300 * time.Millisecond)
				cancel()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	start := time.Now()
	r, _ := s.apply(ctx, nil, nil)
	cancel()
	wantDiag(t, r.Diagnostics, "Step Interrupted", "incus_instance_state.old-matrix")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the cancelled apply took %s", d)
	}
	if i := inst(t, c, name); i.Status != "Running" {
		t.Fatalf("status after the interrupted stop = %s", i.Status)
	}
	firstSnap := snapshots(t, c, name)

	// The next run: a new provider observes, then applies again.
	s2 := newStep(t, provider(t, nil), incus.InstanceState, "old-matrix", cfg)
	if rr := s2.read(nil); rr.Observation != providers.Absent {
		t.Fatalf("Read of an unfinished stop: %v", rr.Observation)
	}
	done := s2.mustApply(nil, nil)
	if i := inst(t, c, name); i.Status != "Stopped" {
		t.Fatalf("status after resume = %s", i.Status)
	}
	if got := snapshots(t, c, name); !slices.Equal(got, firstSnap) {
		t.Errorf("snapshots after resume %v, want the first attempt's %v", got, firstSnap)
	}
	rr := s2.read(nil)
	if rr.Observation != providers.Present || rr.Revert == nil || !strings.Contains(rr.Revert.Description, "start") {
		t.Fatalf("Read after resume: %v %+v", rr.Observation, rr.Revert)
	}
	s2.revert(done.Revert)
	if i := inst(t, c, name); i.Status != "Running" {
		t.Errorf("status after rollback = %s", i.Status)
	}
}

// TestUnknownInstance: a clear error, at plan time and at apply time.
func TestUnknownInstance(t *testing.T) {
	t.Parallel()
	client(t)
	p := provider(t, nil)
	name := unique("ghost")
	s := newStep(t, p, incus.InstanceState, "ghost", map[string]cty.Value{"instance": str(name), "state": str("stopped")})
	wantDiag(t, s.plan(nil).Diagnostics, "Unknown Instance", name, "incus_instance.NAME.name")
	r, _ := s.apply(ctxT(t, 30*time.Second), nil, nil)
	wantDiag(t, r.Diagnostics, "Unknown Instance", name)
	if rr := s.read(nil); rr.Observation != providers.Absent {
		t.Errorf("Read of a missing instance: %v", rr.Observation)
	}
	sn := newStep(t, p, incus.Snapshot, "ghost", map[string]cty.Value{"instance": str(name), "name": str("x")})
	wantDiag(t, sn.plan(nil).Diagnostics, "Unknown Instance", name)
	if _, _, err := client(t).Instance(ctxT(t, 5*time.Second), name); !incusapi.IsNotFound(err) {
		t.Fatal(err)
	}
}

// TestSnapshotLifecycle: create (rollback deletes it), restore with a
// snapshot before (rollback restores that), delete (irreversible).
func TestSnapshotLifecycle(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := launch(t, c, "snap", false, map[string]string{"user.v": "1"})
	create := newStep(t, p, incus.Snapshot, "before-cutover", map[string]cty.Value{"instance": str(name), "name": str("cutover")})
	wantContains(t, "the create diff", create.mustPlan(nil).Diff, "+ snapshot cutover of instance", "rollback: delete the snapshot")
	cr := create.mustApply(nil, nil)
	if !slices.Contains(snapshots(t, c, name), "cutover") {
		t.Fatal("no snapshot")
	}
	if r := create.read(priorOf(cr)); r.Observation != providers.Present {
		t.Errorf("Read after create: %v", r.Observation)
	}
	wantContains(t, "the re-plan", create.mustPlan(priorOf(cr)).Diff, "already exists: nothing to do")

	// Change, then restore with a snapshot before.
	i := inst(t, c, name)
	put := i.Put()
	put.Config["user.v"] = "2"
	if err := c.UpdateInstance(ctxT(t, 30*time.Second), name, put, ""); err != nil {
		t.Fatal(err)
	}
	restore := newStep(t, p, incus.Snapshot, "back", map[string]cty.Value{"instance": str(name), "name": str("cutover"), "action": str("restore"), "snapshot_before": cty.True})
	wantContains(t, "the restore diff", restore.mustPlan(nil).Diff, "~ restore instance", "rollback: restore the snapshot taken first")
	rr := restore.mustApply(nil, nil)
	if v := inst(t, c, name).Config["user.v"]; v != "1" {
		t.Fatalf("after restore user.v = %q", v)
	}
	before := rr.Outputs.GetAttr("before").AsString()
	if !slices.Contains(snapshots(t, c, name), before) {
		t.Fatalf("no snapshot %q before the restore: %v", before, snapshots(t, c, name))
	}
	restore.revert(rr.Revert)
	if v := inst(t, c, name).Config["user.v"]; v != "2" {
		t.Errorf("after undoing the restore user.v = %q", v)
	}
	noBefore := newStep(t, p, incus.Snapshot, "back2", map[string]cty.Value{"instance": str(name), "name": str("cutover"), "action": str("restore")})
	nb := noBefore.mustPlan(nil)
	wantContains(t, "the irreversible restore diff", nb.Diff, "irreversible")
	wantContains(t, "the restore's irreversible reason", nb.Irreversible, "snapshot_before")
	if r := noBefore.mustApply(nil, nil); r.Revert != nil {
		t.Errorf("a restore without snapshot_before returned revert data: %+v", r.Revert)
	}
	missing := newStep(t, p, incus.Snapshot, "back3", map[string]cty.Value{"instance": str(name), "name": str("nope"), "action": str("restore")})
	if d := missing.plan(nil).Diagnostics; d.HasErrors() || len(d) != 1 || d[0].Summary != "Snapshot Not Found Yet" {
		t.Errorf("plan of a restore of a missing snapshot: %v", d)
	}
	r, _ := missing.apply(ctxT(t, 30*time.Second), nil, nil)
	wantDiag(t, r.Diagnostics, "Unknown Snapshot", "nope")

	// Rollback of the create deletes it.
	create.revert(cr.Revert)
	if slices.Contains(snapshots(t, c, name), "cutover") {
		t.Error("rollback left the created snapshot")
	}

	// Delete: irreversible, idempotent.
	del := newStep(t, p, incus.Snapshot, "drop", map[string]cty.Value{"instance": str(name), "name": str(before), "action": str("delete")})
	dp := del.mustPlan(nil)
	wantContains(t, "the delete diff", dp.Diff, "- delete snapshot "+before, "irreversible")
	wantContains(t, "the delete's irreversible reason", dp.Irreversible, "cannot be brought back")
	dr := del.mustApply(nil, nil)
	if dr.Revert != nil || slices.Contains(snapshots(t, c, name), before) {
		t.Errorf("delete: revert data %+v, snapshots %v", dr.Revert, snapshots(t, c, name))
	}
	if r := del.read(priorOf(dr)); r.Observation != providers.Present {
		t.Errorf("Read after delete: %v", r.Observation)
	}
	wantContains(t, "the re-plan", del.mustPlan(nil).Diff, "already absent")
}

// TestStartTriedAgainAfterTheDaemonFailedIt: a daemon that stalls under
// load fails a start (its liblxc hooks time out) and leaves the instance
// stopped, as it did to a rollback in TestRunbookRunAndRollback on a busy
// host; the start is tried once more. The failure: a pre-start hook
// (raw.lxc) that fails the first time it runs.
func TestStartTriedAgainAfterTheDaemonFailedIt(t *testing.T) {
	t.Parallel()
	c := client(t)
	if isLab {
		t.Skip("the lab's host runs no liblxc hooks")
	}
	marker := filepath.Join(t.TempDir(), "tried")
	name := launch(t, c, "restart", false, map[string]string{
		"raw.lxc": "lxc.hook.pre-start = /bin/sh -c '[ -e " + marker + " ] || { touch " + marker + "; exit 1; }'",
	})
	s := newStep(t, provider(t, nil), incus.InstanceState, "restart", map[string]cty.Value{"instance": str(name), "state": str("running")})
	r, log := s.apply(ctxT(t, 2*time.Minute), nil, nil)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\nlog:\n%s", err, log)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the failing hook never ran: %v", err)
	}
	if i := inst(t, c, name); i.Status != "Running" {
		t.Fatalf("after the start: %s", i.Status)
	}
	wantContains(t, "the log", log, "did not start", "trying once more")
}
