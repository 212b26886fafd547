package incus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// stateSpec is an incus_instance_state step, decoded.
type stateSpec struct {
	instance          string
	state             string // "stopped" or "running"
	snapshotBefore    bool
	keep              bool
	stopTimeout       time.Duration
	stopTimeoutText   string
	forceAfter        bool
	restoreOnRollback bool
	known             bool
}

// defaultStopTimeout is how long a graceful stop may take unless told.
const defaultStopTimeout = 30 * time.Second

func (c *call) decodeState() stateSpec {
	s := stateSpec{known: c.known()}
	k := func(ok bool) {
		if !ok {
			s.known = false
		}
	}
	var ok bool
	s.instance, ok = c.str("instance", "")
	k(ok)
	s.state, ok = c.str("state", "")
	k(ok)
	s.snapshotBefore, ok = c.boolean("snapshot_before", false)
	k(ok)
	s.keep, ok = c.boolean("keep_for_rollback", true)
	k(ok)
	s.stopTimeoutText, ok = c.str("stop_timeout", "30s")
	k(ok)
	s.forceAfter, ok = c.boolean("force_after", false)
	k(ok)
	s.restoreOnRollback, ok = c.boolean("restore_on_rollback", false)
	k(ok)
	if !c.known() {
		return s
	}
	if v := c.get("instance"); v.IsKnown() && (v.IsNull() || s.instance == "") {
		c.errorf("Missing Required Attribute", "The \"instance\" attribute of %s is required.", c.what)
	}
	if v := c.get("state"); v.IsKnown() {
		switch s.state {
		case "stopped", "running":
		case "":
			c.errorf("Missing Required Attribute", "The \"state\" attribute of %s is required: \"stopped\" or \"running\".", c.what)
		default:
			c.errorf("Invalid Attribute Value", "The \"state\" attribute of %s must be \"stopped\" or \"running\", not %q.", c.what, s.state)
		}
	}
	s.stopTimeout = defaultStopTimeout
	if v := c.get("stop_timeout"); v.IsKnown() && !v.IsNull() {
		d, err := time.ParseDuration(s.stopTimeoutText)
		if err != nil || d <= 0 {
			c.errorf("Invalid Attribute Value", "The \"stop_timeout\" attribute of %s must be a positive duration such as \"30s\" or \"5m\", not %q.", c.what, s.stopTimeoutText)
		} else {
			s.stopTimeout = d
		}
	}
	if s.restoreOnRollback && !s.snapshotBefore {
		c.errorf("Conflicting Attributes", "%s sets restore_on_rollback without snapshot_before = true: there would be no snapshot to restore.", c.what)
	}
	return s
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

// stateInverse is how to undo an incus_instance_state step.
type stateInverse struct {
	Op       string `json:"op"` // "start", "stop" or "none"
	Instance string `json:"instance,omitempty"`
	// Snapshot taken before the change, restored first when Restore.
	Snapshot string `json:"snapshot,omitempty"`
	Restore  bool   `json:"restore,omitempty"`
	// Keep: the instance was kept for rollback; its absence is an error.
	Keep bool `json:"keep,omitempty"`
	// For "stop": the graceful timeout, force after it, and the marks the
	// start removed, put back.
	Timeout int               `json:"timeout,omitempty"`
	Force   bool              `json:"force,omitempty"`
	Marks   map[string]string `json:"marks,omitempty"`
}

var markKeys = []string{KeyKeepForRollback, KeyStoppedAt, KeyStoppedBy, KeySnapshot}

func (c *call) planState(ctx context.Context, req providers.PlanRequest) providers.PlanResponse {
	s := c.decodeState()
	if c.diags.HasErrors() {
		return providers.PlanResponse{}
	}
	verb := map[string]string{"stopped": "stop", "running": "start"}[s.state]
	if !s.known {
		return providers.PlanResponse{Diff: fmt.Sprintf("%s an instance (its name is known after earlier steps run)", firstNonEmpty(verb, "stop or start"))}
	}
	inst, _, err := c.getInstance(ctx, s.instance)
	if err != nil {
		return providers.PlanResponse{Diagnostics: c.apiErr("Cannot Read Instance", err)}
	}
	if inst == nil {
		return providers.PlanResponse{Diagnostics: c.unknownInstance(s.instance, " If an earlier step creates it, refer to that step's output (instance = incus_instance.NAME.name) so that the plan waits for it.")}
	}
	cur := status(inst)
	if cur == s.state {
		return providers.PlanResponse{Diff: fmt.Sprintf("instance %q is already %s: nothing to do", s.instance, s.state)}
	}
	var b strings.Builder
	if s.state == "stopped" {
		fmt.Fprintf(&b, "~ stop instance %q (%s -> stopped): gracefully within %s", s.instance, cur, s.stopTimeout)
		if s.forceAfter {
			b.WriteString(", then by force")
		} else {
			b.WriteString(" (no force: force_after is not set)")
		}
	} else {
		fmt.Fprintf(&b, "~ start instance %q (%s -> running)", s.instance, cur)
	}
	if s.snapshotBefore {
		fmt.Fprintf(&b, "\n  + snapshot %s first", snapshotName(c.addr, time.Now()))
	}
	if s.state == "stopped" {
		if s.keep {
			fmt.Fprintf(&b, "\n  + config %s = \"true\" (kept for rollback; a cleanup may delete it only after its retain_until)", KeyKeepForRollback)
		}
		fmt.Fprintf(&b, "\n  + config %s, %s", KeyStoppedAt, KeyStoppedBy)
		b.WriteString("\n  rollback: ")
		if s.restoreOnRollback {
			b.WriteString("restore the snapshot, then ")
		}
		b.WriteString("start it again")
	} else {
		b.WriteString("\n  rollback: stop it again")
	}
	return providers.PlanResponse{Diff: b.String()}
}

func stateOutputs(instance, previous, snapshot string) cty.Value {
	return cty.ObjectVal(map[string]cty.Value{
		"instance":       cty.StringVal(instance),
		"previous_state": cty.StringVal(previous),
		"snapshot":       cty.StringVal(snapshot),
	})
}

// startInverse undoes a stop: start again, restoring the snapshot first
// when asked.
func startInverse(s stateSpec, snapshot string) *providers.Inverse {
	desc := "start instance " + s.instance + " again"
	restore := s.restoreOnRollback && snapshot != ""
	if restore {
		desc = fmt.Sprintf("restore snapshot %s of instance %s, then start it again", snapshot, s.instance)
	}
	return &providers.Inverse{Description: desc, Data: marshal(stateInverse{Op: "start", Instance: s.instance, Snapshot: snapshot, Restore: restore, Keep: s.keep})}
}

func nothingToUndo(s stateSpec) *providers.Inverse {
	return &providers.Inverse{Description: fmt.Sprintf("nothing to undo: instance %s was already %s", s.instance, s.state), Data: marshal(stateInverse{Op: "none"})}
}

func (c *call) readState(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
	s := c.decodeState()
	if c.diags.HasErrors() || !s.known {
		return providers.ReadResponse{Observation: providers.Unknown}
	}
	inst, _, err := c.getInstance(ctx, s.instance)
	if err != nil {
		return providers.ReadResponse{Diagnostics: c.apiErr("Cannot Read Instance", err)}
	}
	if inst == nil {
		return providers.ReadResponse{Observation: providers.Absent, Detail: fmt.Sprintf("instance %q does not exist", s.instance)}
	}
	cur := status(inst)
	if cur != s.state {
		if req.Prior != nil {
			return providers.ReadResponse{Observation: providers.Drifted, Detail: fmt.Sprintf("instance %q is %s; the step made it %s", s.instance, cur, s.state)}
		}
		return providers.ReadResponse{Observation: providers.Absent, Detail: fmt.Sprintf("instance %q is %s, not yet %s", s.instance, cur, s.state)}
	}
	r := providers.ReadResponse{Observation: providers.Present}
	ours := inst.Config[KeyStoppedBy] == c.addr.String()
	switch {
	case req.Prior != nil:
		r.Outputs = req.Prior.Outputs
	case ours && s.state == "stopped":
		// A stop this step started finished before its run could record
		// it: adopt it with the way back.
		snap := inst.Config[KeySnapshot]
		r.Outputs = stateOutputs(s.instance, "running", snap)
		r.Inverse = startInverse(s, snap)
	default:
		r.Outputs = stateOutputs(s.instance, cur, "")
		r.Inverse = nothingToUndo(s)
	}
	return r
}

func (c *call) applyState(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
	s := c.decodeState()
	if c.diags.HasErrors() {
		return providers.ApplyResponse{}
	}
	if !s.known {
		c.errorf("Unknown Attribute Values", "%s cannot run: some of its settings are still unknown.", c.what)
		return providers.ApplyResponse{}
	}
	inst, _, err := c.getInstance(ctx, s.instance)
	if err != nil {
		return providers.ApplyResponse{Diagnostics: c.apiErr("Cannot Read Instance", err)}
	}
	if inst == nil {
		return providers.ApplyResponse{Diagnostics: c.unknownInstance(s.instance, "")}
	}
	cur := status(inst)
	ours := inst.Config[KeyStoppedBy] == c.addr.String()
	if cur == s.state {
		c.logf("instance %s is already %s: nothing to do", s.instance, s.state)
		if ours && s.state == "stopped" {
			snap := inst.Config[KeySnapshot]
			return providers.ApplyResponse{Outputs: stateOutputs(s.instance, "running", snap), Inverse: startInverse(s, snap)}
		}
		return providers.ApplyResponse{Outputs: stateOutputs(s.instance, cur, ""), Inverse: nothingToUndo(s)}
	}
	snap := ""
	if s.snapshotBefore {
		snap, err = c.snapshotBefore(ctx, s.instance, inst, ours)
		if err != nil {
			return providers.ApplyResponse{Diagnostics: c.apiErr("Cannot Snapshot Instance", err)}
		}
	}
	if s.state == "stopped" {
		return c.stopInstance(ctx, s, inst, cur, snap)
	}
	return c.startInstance(ctx, s, inst, cur, snap)
}

// snapshotBefore takes the snapshot before a change; a snapshot this step
// took in an interrupted attempt (its name is in the marks) is reused, as
// it is the state from before the change.
func (c *call) snapshotBefore(ctx context.Context, name string, inst *incusapi.Instance, ours bool) (string, error) {
	if prev := inst.Config[KeySnapshot]; ours && prev != "" {
		if ok, err := c.hasSnapshot(ctx, name, prev); err != nil {
			return "", err
		} else if ok {
			c.logf("instance %s: snapshot %s, taken before an interrupted attempt, is kept as the one from before the change", name, prev)
			return prev, nil
		}
	}
	snap, err := c.freeSnapshotName(ctx, name, snapshotName(c.addr, time.Now()))
	if err != nil {
		return "", err
	}
	start := time.Now()
	if err := c.c.CreateSnapshot(ctx, name, snap, false); err != nil {
		return "", err
	}
	c.logf("instance %s: snapshot %s taken in %s", name, snap, time.Since(start).Round(time.Millisecond))
	return snap, nil
}

// freeSnapshotName returns base, or base-2, base-3... when taken (two
// attempts within a second).
func (c *call) freeSnapshotName(ctx context.Context, instance, base string) (string, error) {
	list, err := c.c.Snapshots(ctx, instance)
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

func (c *call) hasSnapshot(ctx context.Context, instance, snap string) (bool, error) {
	list, err := c.c.Snapshots(ctx, instance)
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
func (c *call) setMarks(ctx context.Context, name string, marks map[string]string) error {
	for attempt := 1; ; attempt++ {
		inst, etag, err := c.c.Instance(ctx, name)
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
		err = c.c.UpdateInstance(ctx, name, put, etag)
		if errors.Is(err, incusapi.ErrConflict) && attempt < 5 {
			continue
		}
		return err
	}
}

func (c *call) stopInstance(ctx context.Context, s stateSpec, inst *incusapi.Instance, cur, snap string) providers.ApplyResponse {
	marks := map[string]string{
		KeyStoppedBy: c.addr.String(),
		KeySnapshot:  snap,
	}
	if inst.Config[KeyStoppedBy] != c.addr.String() || inst.Config[KeyStoppedAt] == "" {
		marks[KeyStoppedAt] = time.Now().UTC().Format(time.RFC3339)
	}
	if s.keep {
		marks[KeyKeepForRollback] = "true"
	}
	// The marks go first: a stop interrupted half-way is then recognised
	// by the next run, and no cleanup deletes the instance meanwhile.
	if err := c.setMarks(ctx, s.instance, marks); err != nil {
		return providers.ApplyResponse{Diagnostics: c.apiErr("Cannot Mark Instance", err)}
	}
	start := time.Now()
	err := c.c.SetState(ctx, s.instance, incusapi.InstanceStatePut{Action: "stop", Timeout: s.timeoutSeconds()})
	switch {
	case err == nil || incusapi.IsAlreadyInState(err):
		c.logf("instance %s stopped gracefully in %s", s.instance, time.Since(start).Round(time.Millisecond))
	case incusapi.IsShutdownTimeout(err) && s.forceAfter:
		c.logf("instance %s did not shut down within %s; forcing it off (force_after)", s.instance, s.stopTimeout)
		if err := c.setState(ctx, s.instance, incusapi.InstanceStatePut{Action: "stop", Force: true}); err != nil {
			return providers.ApplyResponse{Diagnostics: c.apiErr("Cannot Stop Instance", err)}
		}
		c.logf("instance %s stopped by force", s.instance)
	case incusapi.IsShutdownTimeout(err):
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Graceful Stop Timed Out",
			"%s: instance %q did not shut down within stop_timeout (%s) and is still running; nothing was forced. Set force_after = true on the step to force it off after the timeout, or raise stop_timeout if the guest needs longer.",
			c.addr, s.instance, s.stopTimeout)}
	case c.settled(ctx, s.instance, "stop"):
		c.logf("instance %s stopped (a stop already under way finished first)", s.instance)
	default:
		return providers.ApplyResponse{Diagnostics: c.apiErr("Cannot Stop Instance", err)}
	}
	return providers.ApplyResponse{Outputs: stateOutputs(s.instance, cur, snap), Inverse: startInverse(s, snap)}
}

func (c *call) startInstance(ctx context.Context, s stateSpec, inst *incusapi.Instance, cur, snap string) providers.ApplyResponse {
	start := time.Now()
	if err := c.setState(ctx, s.instance, incusapi.InstanceStatePut{Action: "start"}); err != nil {
		return providers.ApplyResponse{Diagnostics: c.apiErr("Cannot Start Instance", err)}
	}
	c.logf("instance %s started in %s", s.instance, time.Since(start).Round(time.Millisecond))
	// Back in service: it is no longer kept for rollback. The marks go
	// back with the inverse.
	old := map[string]string{}
	clear := map[string]string{}
	for _, k := range markKeys {
		if v, ok := inst.Config[k]; ok {
			old[k] = v
			clear[k] = ""
		}
	}
	if len(clear) > 0 {
		if err := c.setMarks(ctx, s.instance, clear); err != nil {
			return providers.ApplyResponse{Diagnostics: c.apiErr("Cannot Unmark Instance", err)}
		}
	}
	desc := "stop instance " + s.instance + " again"
	return providers.ApplyResponse{
		Outputs: stateOutputs(s.instance, cur, snap),
		Inverse: &providers.Inverse{Description: desc, Data: marshal(stateInverse{Op: "stop", Instance: s.instance, Snapshot: snap, Timeout: s.timeoutSeconds(), Force: s.forceAfter, Marks: old})},
	}
}

func (c *call) revertState(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
	var inv stateInverse
	if err := json.Unmarshal(req.Inverse.Data, &inv); err != nil {
		return providers.RevertResponse{Diagnostics: phases.Errorf("Invalid Inverse", "The inverse of %s recorded in state cannot be read: %v.", c.addr, err)}
	}
	if inv.Op == "none" {
		return providers.RevertResponse{}
	}
	cfgName, _ := c.str("instance", "")
	name := pick(inv.Instance, cfgName)
	inst, _, err := c.getInstance(ctx, name)
	if err != nil {
		return providers.RevertResponse{Diagnostics: c.apiErr("Cannot Read Instance", err)}
	}
	if inst == nil {
		if inv.Op == "start" && !inv.Keep {
			return providers.RevertResponse{Diagnostics: phases.Diagnostics{{Severity: phases.Warning, Summary: "Instance Gone",
				Detail: fmt.Sprintf("%s: instance %s no longer exists (it was not kept for rollback), so it cannot be started again.", c.addr, name)}}}
		}
		return providers.RevertResponse{Diagnostics: c.unknownInstance(name, " It was kept for rollback, yet it is gone: rollback cannot start it again.")}
	}
	switch inv.Op {
	case "start":
		snap := pick(inv.Snapshot, "")
		// Resumed on a running instance: the restore came before the start,
		// so it was done; again, it would undo what happened since.
		again := req.Resumed && inst.Status == "Running"
		if again && inv.Restore && snap != "" {
			c.logf("instance %s is running: snapshot %s was restored before it started, not again", name, snap)
		}
		if inv.Restore && snap != "" && !again {
			start := time.Now()
			if err := c.c.RestoreSnapshot(ctx, name, snap); err != nil {
				return providers.RevertResponse{Diagnostics: c.apiErr("Cannot Restore Snapshot", err)}
			}
			c.logf("instance %s: snapshot %s restored in %s", name, snap, time.Since(start).Round(time.Millisecond))
		}
		start := time.Now()
		if err := c.setState(ctx, name, incusapi.InstanceStatePut{Action: "start"}); err != nil {
			return providers.RevertResponse{Diagnostics: c.apiErr("Cannot Start Instance", err)}
		}
		c.logf("instance %s running again (started in %s)", name, time.Since(start).Round(time.Millisecond))
		clear := map[string]string{}
		for _, k := range markKeys {
			clear[k] = ""
		}
		if err := c.setMarks(ctx, name, clear); err != nil {
			return providers.RevertResponse{Diagnostics: c.apiErr("Cannot Unmark Instance", err)}
		}
		if snap != "" && !inv.Restore {
			c.logf("instance %s: snapshot %s is kept", name, snap)
		}
	case "stop":
		err := c.c.SetState(ctx, name, incusapi.InstanceStatePut{Action: "stop", Timeout: max(1, inv.Timeout)})
		if incusapi.IsShutdownTimeout(err) && inv.Force {
			err = c.setState(ctx, name, incusapi.InstanceStatePut{Action: "stop", Force: true})
		}
		if err != nil && !incusapi.IsAlreadyInState(err) {
			return providers.RevertResponse{Diagnostics: c.apiErr("Cannot Stop Instance", err)}
		}
		c.logf("instance %s stopped again", name)
		if len(inv.Marks) > 0 {
			if err := c.setMarks(ctx, name, inv.Marks); err != nil {
				return providers.RevertResponse{Diagnostics: c.apiErr("Cannot Mark Instance", err)}
			}
		}
	default:
		return providers.RevertResponse{Diagnostics: phases.Errorf("Invalid Inverse", "The inverse of %s has an unknown operation %q.", c.addr, inv.Op)}
	}
	return providers.RevertResponse{}
}
