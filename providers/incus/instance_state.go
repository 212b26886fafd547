package incus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// stateSpec is an incus_instance_state step.
type stateSpec struct {
	Instance          string `cty:"instance" required:"true" doc:"The instance name."`
	State             string `cty:"state" required:"true" doc:"\"stopped\" or \"running\"."`
	SnapshotBefore    bool   `cty:"snapshot_before" doc:"Take a snapshot (migrate-STEP-UNIXTIME) just before the change."`
	Keep              *bool  `cty:"keep_for_rollback" doc:"Mark a stopped instance as kept for rollback (user.migrate.keep_for_rollback), so that no cleanup deletes it before its retain_until; true by default."`
	StopTimeout       string `cty:"stop_timeout" doc:"How long a graceful stop may take, \"30s\" by default."`
	ForceAfter        bool   `cty:"force_after" doc:"Force the stop when the graceful one times out; otherwise the step fails and the instance keeps running."`
	RestoreOnRollback bool   `cty:"restore_on_rollback" doc:"Rollback restores the snapshot taken before the change, then starts the instance again."`

	keep        bool
	stopTimeout time.Duration
}

// stateOut is the outputs of an incus_instance_state step.
type stateOut struct {
	Instance      string `cty:"instance"`
	PreviousState string `cty:"previous_state"`
	Snapshot      string `cty:"snapshot"`
}

type (
	statePrior = *sdk.Prior[struct{}, stateRevert]
	stateApply = sdk.Apply[struct{}, stateRevert]
	stateInv   = *sdk.RevertData[stateRevert]
)

// InstanceState is the name of the incus_instance_state step type.
const InstanceState = "incus_instance_state"

var stateStep = &sdk.StepType[*conn, stateSpec, struct{}, stateRevert]{
	Name:        InstanceState,
	Description: "Stops or starts an instance: gracefully with a timeout (force only when force_after is set), optionally after a snapshot; a stopped instance is kept for rollback, which starts it again, and its boot.autostart is set to false, so that a reboot of the host does not start it beside what replaced it.",
	Rollback:    "Puts the instance back in its previous state (a stopped VM is started again, restored from its snapshot with restore_on_rollback, its boot.autostart as it was).",
	Outputs:     stateOut{},
	Validate:    validateState,
	Read:        readState,
	Plan:        planState,
	Apply:       applyState,
	Revert:      revertState,
}

// defaultStopTimeout is how long a graceful stop may take unless told.
const defaultStopTimeout = 30 * time.Second

func validateState(c *call, s *stateSpec) phases.Diagnostics {
	var diags phases.Diagnostics
	what := c.Addr
	if s.Instance == "" {
		diags = append(diags, errorf("Missing Required Attribute", "The \"instance\" attribute of %s is required.", what)...)
	}
	switch s.State {
	case "stopped", "running":
	case "":
		diags = append(diags, errorf("Missing Required Attribute", "The \"state\" attribute of %s is required: \"stopped\" or \"running\".", what)...)
	default:
		diags = append(diags, errorf("Invalid Attribute Value", "The \"state\" attribute of %s must be \"stopped\" or \"running\", not %q.", what, s.State)...)
	}
	s.keep = s.Keep == nil || *s.Keep
	s.stopTimeout = defaultStopTimeout
	if s.StopTimeout != "" {
		d, err := time.ParseDuration(s.StopTimeout)
		if err != nil || d <= 0 {
			diags = append(diags, errorf("Invalid Attribute Value", "The \"stop_timeout\" attribute of %s must be a positive duration such as \"30s\" or \"5m\", not %q.", what, s.StopTimeout)...)
		} else {
			s.stopTimeout = d
		}
	}
	if s.RestoreOnRollback && !s.SnapshotBefore {
		diags = append(diags, errorf("Conflicting Attributes", "%s sets restore_on_rollback without snapshot_before = true: there would be no snapshot to restore.", what)...)
	}
	return diags
}

// timeoutSeconds is the graceful stop timeout as the API takes it.
func (s stateSpec) timeoutSeconds() int {
	return max(1, int(math.Ceil(s.stopTimeout.Seconds())))
}

// status maps Incus statuses to the step's states.
func status(inst *incusapi.Instance) string {
	switch inst.Status {
	case "Running":
		return "running"
	case "Stopped":
		return "stopped"
	}
	return strings.ToLower(inst.Status)
}

var snapNameRE = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// snapshotName is the name of a snapshot taken before a step's change.
func snapshotName(addr phases.Address, now time.Time) string {
	return fmt.Sprintf("migrate-%s-%d", strings.Trim(snapNameRE.ReplaceAllString(addr.Name, "-"), "-"), now.Unix())
}

// stateRevert is how to undo an incus_instance_state step.
type stateRevert struct {
	Op       string `json:"op"` // "start", "stop" or "none"
	Instance string `json:"instance,omitempty"`
	// Snapshot taken before the change, restored first when Restore.
	Snapshot string `json:"snapshot,omitempty"`
	Restore  bool   `json:"restore,omitempty"`
	// Keep: the instance was kept for rollback; its absence is an error.
	Keep bool `json:"keep,omitempty"`
	// Autostart is boot.autostart before the stop ("true", "false" or
	// "unset"), put back by "start" when the instance lost its mark.
	Autostart string `json:"autostart,omitempty"`
	// For "stop": the graceful timeout, force after it, and the marks the
	// start removed, put back.
	Timeout int               `json:"timeout,omitempty"`
	Force   bool              `json:"force,omitempty"`
	Marks   map[string]string `json:"marks,omitempty"`
}

var markKeys = []string{KeyKeepForRollback, KeyStoppedAt, KeyStoppedBy, KeySnapshot, KeyAutostartBefore}

// keyAutostart is the daemon's own key: whether the instance starts when
// the host boots (unset: as it was running when the host went down).
const keyAutostart = "boot.autostart"

// autostartBefore is what KeyAutostartBefore keeps of an instance's
// boot.autostart: its value, or "unset".
func autostartBefore(inst *incusapi.Instance) string {
	if v, ok := inst.Config[keyAutostart]; ok {
		return v
	}
	return "unset"
}

// autostartRestored is the boot.autostart to put back for what
// KeyAutostartBefore kept ("" removes the key, as setMarks does); ok is
// false when nothing was kept.
func autostartRestored(inst *incusapi.Instance) (value string, ok bool) {
	before, ok := inst.Config[KeyAutostartBefore]
	if !ok {
		return "", false
	}
	if before == "unset" {
		return "", true
	}
	return before, true
}

// autostartPlan says what the stop does to boot.autostart.
func autostartPlan(inst *incusapi.Instance) string {
	if inst.Config[keyAutostart] == "false" {
		return ""
	}
	was := "unset"
	if v, ok := inst.Config[keyAutostart]; ok {
		was = fmt.Sprintf("%q", v)
	}
	return fmt.Sprintf("\n  ~ config %s = \"false\" (was %s: a reboot of the host must not start it again; rollback puts it back)", keyAutostart, was)
}

func planState(ctx context.Context, c *call, s stateSpec, _ statePrior) sdk.Plan[struct{}] {
	inst, d := existing(ctx, c, s.Instance, planHint)
	if d != nil {
		return sdk.Plan[struct{}]{Diagnostics: d}
	}
	cur := status(inst)
	if cur == s.State {
		return sdk.Plan[struct{}]{Diff: fmt.Sprintf("instance %q is already %s: nothing to do", s.Instance, s.State)}
	}
	var b strings.Builder
	if s.State == "stopped" {
		fmt.Fprintf(&b, "~ stop instance %q (%s -> stopped): gracefully within %s", s.Instance, cur, s.stopTimeout)
		if s.ForceAfter {
			b.WriteString(", then by force")
		} else {
			b.WriteString(" (no force: force_after is not set)")
		}
	} else {
		fmt.Fprintf(&b, "~ start instance %q (%s -> running)", s.Instance, cur)
	}
	if s.SnapshotBefore {
		fmt.Fprintf(&b, "\n  + snapshot %s first", snapshotName(c.Addr, time.Now()))
	}
	if s.State == "stopped" {
		if s.keep {
			fmt.Fprintf(&b, "\n  + config %s = \"true\" (kept for rollback; a cleanup may delete it only after its retain_until)", KeyKeepForRollback)
		}
		fmt.Fprintf(&b, "\n  + config %s, %s", KeyStoppedAt, KeyStoppedBy)
		b.WriteString(autostartPlan(inst))
		b.WriteString("\n  rollback: ")
		if s.RestoreOnRollback {
			b.WriteString("restore the snapshot, then ")
		}
		b.WriteString("start it again")
	} else {
		b.WriteString("\n  rollback: stop it again")
	}
	return sdk.Plan[struct{}]{Diff: b.String()}
}

// startRevert undoes a stop: start again, restoring the snapshot first
// when asked.
func startRevert(s stateSpec, snapshot, autostart string) stateInv {
	desc := "start instance " + s.Instance + " again"
	restore := s.RestoreOnRollback && snapshot != ""
	if restore {
		desc = fmt.Sprintf("restore snapshot %s of instance %s, then start it again", snapshot, s.Instance)
	}
	switch autostart {
	case "", "false":
	case "unset":
		desc += ", " + keyAutostart + " unset again"
	default:
		desc += fmt.Sprintf(", %s = %q again", keyAutostart, autostart)
	}
	return &sdk.RevertData[stateRevert]{Description: desc, Data: stateRevert{Op: "start", Instance: s.Instance, Snapshot: snapshot, Restore: restore, Keep: s.keep, Autostart: autostart}}
}

func nothingToUndo(s stateSpec) stateInv {
	return &sdk.RevertData[stateRevert]{Description: fmt.Sprintf("nothing to undo: instance %s was already %s", s.Instance, s.State), Data: stateRevert{Op: "none"}}
}

func readState(ctx context.Context, c *call, s stateSpec, prior statePrior) sdk.Read[stateRevert] {
	inst, _, err := getInstance(ctx, c, s.Instance)
	if err != nil {
		return sdk.Read[stateRevert]{Diagnostics: apiErr(c, "Cannot Read Instance", err)}
	}
	if inst == nil {
		return sdk.Read[stateRevert]{Observation: providers.Absent, Detail: fmt.Sprintf("instance %q does not exist", s.Instance)}
	}
	cur := status(inst)
	if cur != s.State {
		if prior != nil {
			return sdk.Read[stateRevert]{Observation: providers.Drifted, Detail: fmt.Sprintf("instance %q is %s; the step made it %s", s.Instance, cur, s.State)}
		}
		return sdk.Read[stateRevert]{Observation: providers.Absent, Detail: fmt.Sprintf("instance %q is %s, not yet %s", s.Instance, cur, s.State)}
	}
	r := sdk.Read[stateRevert]{Observation: providers.Present}
	ours := inst.Config[KeyStoppedBy] == c.Addr.String()
	switch {
	case prior != nil:
		r.Outputs = prior.Outputs
	case ours && s.State == "stopped":
		// A stop this step started finished before its run could record
		// it: adopt it with the way back.
		snap := inst.Config[KeySnapshot]
		r.Outputs = stateOut{s.Instance, "running", snap}
		r.Revert = startRevert(s, snap, inst.Config[KeyAutostartBefore])
	default:
		r.Outputs = stateOut{s.Instance, cur, ""}
		r.Revert = nothingToUndo(s)
	}
	return r
}

func applyState(ctx context.Context, c *call, s stateSpec, _ struct{}, _ statePrior) stateApply {
	inst, d := existing(ctx, c, s.Instance, "")
	if d != nil {
		return stateApply{Diagnostics: d}
	}
	cur := status(inst)
	ours := inst.Config[KeyStoppedBy] == c.Addr.String()
	if cur == s.State {
		logf(c, "instance %s is already %s: nothing to do", s.Instance, s.State)
		if ours && s.State == "stopped" {
			snap := inst.Config[KeySnapshot]
			return stateApply{Outputs: stateOut{s.Instance, "running", snap}, Revert: startRevert(s, snap, inst.Config[KeyAutostartBefore])}
		}
		return stateApply{Outputs: stateOut{s.Instance, cur, ""}, Revert: nothingToUndo(s)}
	}
	snap := ""
	if s.SnapshotBefore {
		var err error
		snap, err = snapshotBefore(ctx, c, s.Instance, inst, ours)
		if err != nil {
			return stateApply{Diagnostics: apiErr(c, "Cannot Snapshot Instance", err)}
		}
	}
	if s.State == "stopped" {
		return stopInstance(ctx, c, s, inst, cur, snap)
	}
	return startInstance(ctx, c, s, inst, cur, snap)
}

// snapshotBefore takes the snapshot before a change; a snapshot this step
// took in an interrupted attempt (its name is in the marks) is reused, as
// it is the state from before the change.
func snapshotBefore(ctx context.Context, c *call, name string, inst *incusapi.Instance, ours bool) (string, error) {
	if prev := inst.Config[KeySnapshot]; ours && prev != "" {
		if ok, err := hasSnapshot(ctx, c, name, prev); err != nil {
			return "", err
		} else if ok {
			logf(c, "instance %s: snapshot %s, taken before an interrupted attempt, is kept as the one from before the change", name, prev)
			return prev, nil
		}
	}
	snap, err := freeSnapshotName(ctx, c, name, snapshotName(c.Addr, time.Now()))
	if err != nil {
		return "", err
	}
	start := time.Now()
	if err := c.Settings.c.CreateSnapshot(ctx, name, snap, false); err != nil {
		return "", err
	}
	logf(c, "instance %s: snapshot %s taken in %s", name, snap, time.Since(start).Round(time.Millisecond))
	return snap, nil
}

// freeSnapshotName returns base, or base-2, base-3... when taken (two
// attempts within a second).
func freeSnapshotName(ctx context.Context, c *call, instance, base string) (string, error) {
	list, err := c.Settings.c.Snapshots(ctx, instance)
	if err != nil {
		return "", err
	}
	taken := map[string]bool{}
	for _, x := range list {
		taken[x.Name] = true
	}
	name := base
	for i := 2; taken[name]; i++ {
		name = fmt.Sprintf("%s-%d", base, i)
	}
	return name, nil
}

func hasSnapshot(ctx context.Context, c *call, instance, snap string) (bool, error) {
	list, err := c.Settings.c.Snapshots(ctx, instance)
	if err != nil {
		return false, err
	}
	for _, x := range list {
		if x.Name == snap {
			return true, nil
		}
	}
	return false, nil
}

// setMarks sets (value != "") or removes (value == "") config keys of an
// instance, reading it again when someone changed it meanwhile. Nothing is
// written when the keys already hold the values.
func setMarks(ctx context.Context, c *call, name string, marks map[string]string) error {
	for attempt := 1; ; attempt++ {
		inst, etag, err := c.Settings.c.Instance(ctx, name)
		if err != nil {
			return err
		}
		put := inst.Put()
		put.Config = maps.Clone(inst.Config)
		if put.Config == nil {
			put.Config = map[string]string{}
		}
		changed := false
		for k, v := range marks {
			old, ok := put.Config[k]
			switch {
			case v == "" && ok:
				delete(put.Config, k)
				changed = true
			case v != "" && old != v:
				put.Config[k] = v
				changed = true
			}
		}
		if !changed {
			return nil
		}
		err = c.Settings.c.UpdateInstance(ctx, name, put, etag)
		if errors.Is(err, incusapi.ErrConflict) && attempt < 5 {
			continue
		}
		return err
	}
}

func stopInstance(ctx context.Context, c *call, s stateSpec, inst *incusapi.Instance, cur, snap string) stateApply {
	marks := map[string]string{
		KeyStoppedBy: c.Addr.String(),
		KeySnapshot:  snap,
	}
	if inst.Config[KeyStoppedBy] != c.Addr.String() || inst.Config[KeyStoppedAt] == "" {
		marks[KeyStoppedAt] = time.Now().UTC().Format(time.RFC3339)
	}
	if s.keep {
		marks[KeyKeepForRollback] = "true"
	}
	// boot.autostart goes to false, its value before kept on the instance
	// (a stop resumed after a kill finds it there, not the false it set).
	if _, kept := inst.Config[KeyAutostartBefore]; !kept || inst.Config[KeyStoppedBy] != c.Addr.String() {
		marks[KeyAutostartBefore] = autostartBefore(inst)
	}
	marks[keyAutostart] = "false"
	// The marks go first: a stop interrupted half-way is then recognised
	// by the next run, and no cleanup deletes the instance meanwhile.
	if err := setMarks(ctx, c, s.Instance, marks); err != nil {
		return stateApply{Diagnostics: apiErr(c, "Cannot Mark Instance", err)}
	}
	start := time.Now()
	err := c.Settings.c.SetState(ctx, s.Instance, incusapi.InstanceStatePut{Action: "stop", Timeout: s.timeoutSeconds()})
	switch {
	case err == nil || incusapi.IsAlreadyInState(err):
		logf(c, "instance %s stopped gracefully in %s", s.Instance, time.Since(start).Round(time.Millisecond))
	case incusapi.IsShutdownTimeout(err) && s.ForceAfter:
		logf(c, "instance %s did not shut down within %s; forcing it off (force_after)", s.Instance, s.stopTimeout)
		if err := setState(ctx, c, s.Instance, incusapi.InstanceStatePut{Action: "stop", Force: true}); err != nil {
			return stateApply{Diagnostics: apiErr(c, "Cannot Stop Instance", err)}
		}
		logf(c, "instance %s stopped by force", s.Instance)
	case incusapi.IsShutdownTimeout(err):
		return stateApply{Diagnostics: phases.Errorf("Graceful Stop Timed Out",
			"%s: instance %q did not shut down within stop_timeout (%s) and is still running; nothing was forced. Set force_after = true on the step to force it off after the timeout, or raise stop_timeout if the guest needs longer.",
			c.Addr, s.Instance, s.stopTimeout)}
	case settled(ctx, c, s.Instance, "stop", err):
		logf(c, "instance %s stopped (a stop already under way finished first)", s.Instance)
	default:
		return stateApply{Diagnostics: apiErr(c, "Cannot Stop Instance", err)}
	}
	// The world, not only the answer: on a busy daemon a stop can be
	// answered while the instance still runs, or before the daemon's own
	// stop handling ran (its hooks late on a busy host), which then shows
	// it Running for a while. Watched until it is Stopped and recorded so
	// (inState); forced again once when allowed.
	if !settledAs(ctx, c, s.Instance, "Stopped") {
		if s.ForceAfter {
			logf(c, "instance %s is not stopped yet after its stop was answered (%s); forcing it off again", s.Instance, seenState(ctx, c, s.Instance))
			_ = setState(ctx, c, s.Instance, incusapi.InstanceStatePut{Action: "stop", Force: true})
		}
		if !settledAs(ctx, c, s.Instance, "Stopped") {
			return stateApply{Diagnostics: phases.Errorf("Instance Still Running",
				"%s: the daemon answered the stop of instance %q, but %s later it is still not stopped (%s). Nothing else was changed; run again to retry, or look at `incus info %s --show-log`.",
				c.Addr, s.Instance, settleWait, seenState(ctx, c, s.Instance), s.Instance)}
		}
	}
	before := marks[KeyAutostartBefore]
	if before == "" {
		before = inst.Config[KeyAutostartBefore]
	}
	return stateApply{Outputs: stateOut{s.Instance, cur, snap}, Revert: startRevert(s, snap, before)}
}

// seenState says what the daemon shows of an instance: its status and its
// record of the instance's power.
func seenState(ctx context.Context, c *call, name string) string {
	inst, _, err := c.Settings.c.Instance(ctx, name)
	if err != nil {
		return "cannot be read: " + err.Error()
	}
	return fmt.Sprintf("status %s, %s %s", inst.Status, keyPowerState, pick(inst.Config[keyPowerState], "unset"))
}

func startInstance(ctx context.Context, c *call, s stateSpec, inst *incusapi.Instance, cur, snap string) stateApply {
	start := time.Now()
	if err := setState(ctx, c, s.Instance, incusapi.InstanceStatePut{Action: "start"}); err != nil {
		return stateApply{Diagnostics: apiErr(c, "Cannot Start Instance", err)}
	}
	logf(c, "instance %s started in %s", s.Instance, time.Since(start).Round(time.Millisecond))
	// Back in service: it is no longer kept for rollback. The marks go
	// back with the revert data.
	old := map[string]string{}
	clear := map[string]string{}
	for _, k := range markKeys {
		if v, ok := inst.Config[k]; ok {
			old[k] = v
			clear[k] = ""
		}
	}
	if v, ok := autostartRestored(inst); ok {
		clear[keyAutostart] = v
		old[keyAutostart] = inst.Config[keyAutostart]
	}
	if len(clear) > 0 {
		if err := setMarks(ctx, c, s.Instance, clear); err != nil {
			return stateApply{Diagnostics: apiErr(c, "Cannot Unmark Instance", err)}
		}
	}
	desc := "stop instance " + s.Instance + " again"
	return stateApply{
		Outputs: stateOut{s.Instance, cur, snap},
		Revert:  &sdk.RevertData[stateRevert]{Description: desc, Data: stateRevert{Op: "stop", Instance: s.Instance, Snapshot: snap, Timeout: s.timeoutSeconds(), Force: s.ForceAfter, Marks: old}},
	}
}

func revertState(ctx context.Context, c *call, a stateSpec, u sdk.Applied[stateRevert]) phases.Diagnostics {
	inv := u.Data
	if inv.Op == "none" {
		return nil
	}
	name := pick(inv.Instance, a.Instance)
	inst, _, err := getInstance(ctx, c, name)
	if err != nil {
		return apiErr(c, "Cannot Read Instance", err)
	}
	if inst == nil {
		if inv.Op == "start" && !inv.Keep {
			return warning("Instance Gone", "%s: instance %s no longer exists (it was not kept for rollback), so it cannot be started again.", c.Addr, name)
		}
		return unknownInstance(c, name, " It was kept for rollback, yet it is gone: rollback cannot start it again.")
	}
	switch inv.Op {
	case "start":
		snap := pick(inv.Snapshot, "")
		// Resumed on a running instance: the restore came before the start,
		// so it was done; again, it would undo what happened since.
		again := u.Resumed && inst.Status == "Running"
		if again && inv.Restore && snap != "" {
			logf(c, "instance %s is running: snapshot %s was restored before it started, not again", name, snap)
		}
		if inv.Restore && snap != "" && !again {
			start := time.Now()
			if err := c.Settings.c.RestoreSnapshot(ctx, name, snap); err != nil {
				return apiErr(c, "Cannot Restore Snapshot", err)
			}
			logf(c, "instance %s: snapshot %s restored in %s", name, snap, time.Since(start).Round(time.Millisecond))
		}
		start := time.Now()
		if err := setState(ctx, c, name, incusapi.InstanceStatePut{Action: "start"}); err != nil {
			return apiErr(c, "Cannot Start Instance", err)
		}
		logf(c, "instance %s running again (started in %s)", name, time.Since(start).Round(time.Millisecond))
		clear := map[string]string{}
		for _, k := range markKeys {
			clear[k] = ""
		}
		if v, ok := autostartRestored(inst); ok {
			clear[keyAutostart] = v
		} else if inv.Autostart != "" {
			clear[keyAutostart] = strings.TrimPrefix(inv.Autostart, "unset")
		}
		if err := setMarks(ctx, c, name, clear); err != nil {
			return apiErr(c, "Cannot Unmark Instance", err)
		}
		if snap != "" && !inv.Restore {
			logf(c, "instance %s: snapshot %s is kept", name, snap)
		}
	case "stop":
		err := c.Settings.c.SetState(ctx, name, incusapi.InstanceStatePut{Action: "stop", Timeout: max(1, inv.Timeout)})
		if incusapi.IsShutdownTimeout(err) && inv.Force {
			err = setState(ctx, c, name, incusapi.InstanceStatePut{Action: "stop", Force: true})
		}
		if err != nil && !incusapi.IsAlreadyInState(err) {
			return apiErr(c, "Cannot Stop Instance", err)
		}
		logf(c, "instance %s stopped again", name)
		if len(inv.Marks) > 0 {
			if err := setMarks(ctx, c, name, inv.Marks); err != nil {
				return apiErr(c, "Cannot Mark Instance", err)
			}
		}
	default:
		return phases.Errorf("Invalid Revert", "The revert data of %s has an unknown operation %q.", c.Addr, inv.Op)
	}
	return nil
}
