package incus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

func applyInstance(ctx context.Context, c *call, spec InstanceSpec, planned instancePrivate, prior instPrior) instApply {
	s := desired(c, spec)
	inst, etag, err := getInstance(ctx, c, s.Name)
	if err != nil {
		return instApply{Diagnostics: apiErr(c, "Cannot Read Instance", err)}
	}
	if s.Ensure == "absent" {
		return applyAbsent(ctx, c, s, inst)
	}
	managed := instancePrivate{Config: slices.Sorted(maps.Keys(s.Config)), Devices: slices.Sorted(maps.Keys(s.Devices))}
	if inst == nil {
		if planned.Exists {
			return instApply{Diagnostics: errorf("Concurrent Change", "%s: instance %q existed when the plan was made and is gone now. Make a new plan.", c.Addr, s.Name)}
		}
		return createInstance(ctx, c, s, managed)
	}
	if inst.Type != s.Type {
		return instApply{Diagnostics: errorf("Instance Type Differs", "%s: instance %q is a %s, not a %s; Incus cannot change an instance's type.", c.Addr, s.Name, inst.Type, s.Type)}
	}
	ours := inst.Config[KeyCreatedBy] == c.Addr.String()
	if planned.ETag != "" {
		etag = planned.ETag // a change since the plan makes the daemon refuse the update
	} else if !planned.Exists && planned.Planned && !ours {
		return instApply{Diagnostics: errorf("Concurrent Change", "%s: instance %q did not exist when the plan was made, but exists now (made by someone else?). Make a new plan; migrate does not take over an instance it did not expect.", c.Addr, s.Name)}
	}
	pv := managedOf(prior)
	s, managed.HandedOver = withHandedOver(s, pv)
	s, managed.HandedConfig = withHandedConfig(s, pv)
	put, inv := updatedPut(s, inst, pv.Config, pv.Devices)
	ch := instanceChanges(s, inst, pv.Config, pv.Devices)
	if len(ch) > 0 {
		if d := instanceRefs(ctx, c, s, inst); d.HasErrors() {
			return instApply{Diagnostics: d}
		}
		if err := c.Settings.c.UpdateInstance(ctx, s.Name, put, etag); err != nil {
			return instApply{Diagnostics: apiErr(c, "Cannot Update Instance", err)}
		}
		for _, x := range ch {
			logf(c, "instance %s: %c %s", s.Name, x.sign, x.text)
		}
	} else {
		logf(c, "instance %s already has the settings the step manages", s.Name)
	}
	if ours && s.Start && inst.Status != "Running" && neverStarted(inst) {
		// Created by an earlier attempt that stopped before starting it.
		if err := setState(ctx, c, s.Name, incusapi.InstanceStatePut{Action: "start"}); err != nil {
			return instApply{Diagnostics: apiErr(c, "Cannot Start Instance", err)}
		}
		logf(c, "instance %s started", s.Name)
	}
	r := instApply{Private: managed}
	switch {
	case ours:
		r.Revert = deleteRevert(s.Name)
	case len(ch) == 0 && prior != nil && prior.Revert != nil:
		// Applied again (a wait cut by a stop, or one that failed): what
		// undoes the first apply stays, not "nothing to undo".
		r.Revert = prior.Revert
	case len(ch) == 0:
		r.Revert = &sdk.RevertData[instanceRevert]{Description: fmt.Sprintf("nothing to undo: instance %s already had these settings", s.Name), Data: instanceRevert{Op: "none"}}
	default:
		inv.Instance = s.Name
		r.Revert = &sdk.RevertData[instanceRevert]{Description: fmt.Sprintf("restore the previous config and devices of instance %s", s.Name), Data: inv}
	}
	return withAddresses(ctx, c, s, r)
}

// neverStarted: the daemon says "1970-01-01T00:00:00Z" of an instance
// that never ran (last_used_at), not Go's zero time.
func neverStarted(inst *incusapi.Instance) bool {
	return inst.LastUsedAt.IsZero() || inst.LastUsedAt.Unix() <= 0
}

// withAddresses completes a successful apply with the instance's status
// and addresses, waiting for the one wait_for names. A failed wait keeps
// the revert data: the instance is there, and rollback must undo it. So does
// a wait a gentle stop cut (Stopped): the next run applies again, which
// finds the instance and only waits.
func withAddresses(ctx context.Context, c *call, s DesiredInstance, r instApply) instApply {
	a, d, stopped := waitAddress(ctx, c, s)
	r.Diagnostics = append(r.Diagnostics, d...)
	r.Stopped = stopped
	r.Outputs = a.outputs(s.Name, s.Type)
	if inst, _, err := getInstance(context.WithoutCancel(ctx), c, s.Name); err == nil && inst != nil {
		r.Identity = identityOf(inst)
	}
	return r
}

// identityOf names the instance itself, not its name: the daemon gives
// every instance a UUID of its own (volatile.uuid), so one deleted and
// made again under the same name is another. Its records, and those of
// every step made on it, then describe the one before.
func identityOf(inst *incusapi.Instance) string {
	if id := inst.Config["volatile.uuid"]; id != "" {
		return "instance " + inst.Name + " " + id
	}
	return ""
}

// updatedPut returns the instance with the step's settings applied, and
// the revert data that restores the previous ones.
func updatedPut(s DesiredInstance, inst *incusapi.Instance, removedConfig, removedDevices []string) (incusapi.InstancePut, instanceRevert) {
	put := inst.Put()
	put.Config = maps.Clone(inst.Config)
	if put.Config == nil {
		put.Config = map[string]string{}
	}
	put.Devices = map[string]map[string]string{}
	for k, v := range inst.Devices {
		put.Devices[k] = maps.Clone(v)
	}
	inv := instanceRevert{Op: "restore", Config: map[string]*string{}, Devices: map[string]map[string]string{}}
	keep := func(k string, sens bool) {
		old, ok := inst.Config[k]
		switch {
		case !ok:
			inv.Config[k] = nil // absent before: removing it needs no secret
		case sens:
			inv.NotKept = append(inv.NotKept, "config "+k)
		default:
			inv.Config[k] = &old
		}
	}
	for k, v := range s.Config {
		if old, ok := inst.Config[k]; !ok || old != v {
			keep(k, s.SensitiveConfig[k])
			put.Config[k] = v
		}
	}
	for _, k := range removedConfig {
		if _, still := s.Config[k]; still {
			continue
		}
		if _, ok := inst.Config[k]; ok {
			keep(k, s.SensitiveConfig[k])
			delete(put.Config, k)
		}
	}
	keepDev := func(name string, sens bool) {
		if _, ok := inst.Devices[name]; ok && sens {
			inv.NotKept = append(inv.NotKept, "device "+name)
			return
		}
		inv.Devices[name] = maps.Clone(inst.Devices[name]) // nil when absent
	}
	for name, dev := range s.Devices {
		if old, ok := inst.Devices[name]; !ok || !maps.Equal(old, dev) {
			keepDev(name, s.SensitiveDevices[name])
			put.Devices[name] = maps.Clone(dev)
		}
	}
	for _, name := range removedDevices {
		if _, still := s.Devices[name]; still {
			continue
		}
		if _, ok := inst.Devices[name]; ok {
			keepDev(name, s.SensitiveDevices[name])
			delete(put.Devices, name)
		}
	}
	if s.ProfilesSet && !slices.Equal(s.Profiles, inst.Profiles) {
		inv.Profiles, inv.SetProfiles = slices.Clone(inst.Profiles), true
		put.Profiles = slices.Clone(s.Profiles)
	}
	sort.Strings(inv.NotKept)
	return put, inv
}

func createInstance(ctx context.Context, c *call, s DesiredInstance, managed instancePrivate) instApply {
	if d := needsSource(c, s); d != nil {
		return instApply{Diagnostics: d}
	}
	if d := instanceRefs(ctx, c, s, nil); d.HasErrors() {
		return instApply{Diagnostics: d} // the plan may be older than the host
	}
	post := CreateRequest(s, c.Addr.String())
	start := time.Now()
	if err := c.Settings.c.CreateInstance(ctx, post); err != nil {
		if inst, _, gerr := getInstance(context.WithoutCancel(ctx), c, s.Name); gerr == nil && inst != nil && inst.Config[KeyCreatedBy] == c.Addr.String() {
			// The daemon created it before the failure (or the wait was
			// interrupted): the next run adopts it.
			logf(c, "instance %s was created, but: %v", s.Name, err)
		}
		from := fmt.Sprintf("from image %q (a local image: see `incus image list`)", s.Image)
		if s.Empty {
			from = "with an empty disk"
		}
		return instApply{Diagnostics: apiErr(c, "Cannot Create Instance", fmt.Errorf("creating %s %q %s: %w", s.Type, s.Name, from, err))}
	}
	logf(c, "instance %s created (%s) in %s", s.Name, s.Type, time.Since(start).Round(time.Millisecond))
	if s.Start {
		if err := setState(ctx, c, s.Name, incusapi.InstanceStatePut{Action: "start"}); err != nil {
			return instApply{Diagnostics: append(apiErr(c, "Cannot Start Instance", err), phases.Diagnostic{
				Severity: phases.Warning, Summary: "Instance Created But Not Started",
				Detail: fmt.Sprintf("Instance %s was created but did not start; the next run starts it (the instance is recorded as made by %s), and rollback deletes it.", s.Name, c.Addr)})}
		}
		logf(c, "instance %s started", s.Name)
	}
	return withAddresses(ctx, c, s, instApply{Private: managed, Revert: deleteRevert(s.Name)})
}

// setState changes an instance's state; already being there is success.
func setState(ctx context.Context, c *call, name string, st incusapi.InstanceStatePut) error {
	err := c.Settings.c.SetState(ctx, name, st)
	if incusapi.IsAlreadyInState(err) || err != nil && settled(ctx, c, name, st.Action, err) {
		return nil
	}
	if err != nil && st.Action == "start" && ctx.Err() == nil && settledAs(ctx, c, name, "Stopped") {
		// A daemon that stalls under load (seen here: its liblxc hooks
		// time out after 30 s) fails a start and leaves the instance
		// stopped, as if nothing was asked: a rollback must not give up
		// on an old VM for that. Tried once more; a start that fails for
		// a reason of its own fails again, and says so.
		logf(c, "instance %s did not start (%s); trying once more", name, firstLine(err.Error()))
		err = c.Settings.c.SetState(ctx, name, st)
		if incusapi.IsAlreadyInState(err) || err != nil && settled(ctx, c, name, st.Action, err) {
			return nil
		}
	}
	return err
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// settleWait bounds how long settled watches an instance that a failed
// change says is already on its way: the daemon's status can lag behind
// liblxc's by a moment on a busy machine.
const settleWait = 20 * time.Second

// settled reports whether a state change that failed left the instance
// where it was asked to go anyway: another change finished first — a stop
// still in flight in the daemon from a run that was killed, say, or an init
// that exited on its own — which makes ours fail with "container is not
// running". The daemon may still say Running for a moment after liblxc
// said so; only then is the status watched for a while.
func settled(ctx context.Context, c *call, name, action string, err error) bool {
	want := map[string]string{"stop": "Stopped", "start": "Running"}[action]
	if want == "" {
		return false
	}
	if strings.Contains(strings.ToLower(err.Error()), "is not running") && action == "stop" {
		return settledAs(ctx, c, name, want) // racing a stop: watched for a while
	}
	ok, _ := inState(ctx, c, name, want)
	return ok
}

// keyPowerState is the daemon's own record of an instance's power: RUNNING
// from its start until the daemon's stop handling (for a container, its
// post-stop hook) writes STOPPED.
const keyPowerState = "volatile.last_state.power"

// inState reads whether the instance is in state want: its status, and for
// "Stopped" the daemon's record of the stop too. A forced stop can be
// answered ("container is not running") and the status read Stopped before
// the daemon's stop handling ran (its hooks late on a busy host); that
// handling then shows the instance Running until it is done, and writes
// STOPPED as it begins. Stopped with no RUNNING record is a stop the daemon
// is done with. A daemon that keeps no such record is taken at its status.
func inState(ctx context.Context, c *call, name, want string) (bool, error) {
	if want != "Stopped" {
		st, err := c.Settings.c.InstanceState(ctx, name)
		return err == nil && st.Status == want, err
	}
	inst, _, err := c.Settings.c.Instance(ctx, name)
	if err != nil {
		return false, err
	}
	return inst.Status == "Stopped" && inst.Config[keyPowerState] != "RUNNING", nil
}

// settledAs watches the instance for up to settleWait until it is want
// (inState); false when it is not by then (or cannot be read).
func settledAs(ctx context.Context, c *call, name, want string) bool {
	start := time.Now()
	deadline := start.Add(settleWait)
	for {
		ok, err := inState(ctx, c, name, want)
		if ok {
			if d := time.Since(start); d > time.Second {
				logf(c, "instance %s: %s as the daemon has it %s later", name, strings.ToLower(want), d.Round(100*time.Millisecond))
			}
			return true
		}
		if err != nil || time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func applyAbsent(ctx context.Context, c *call, s DesiredInstance, inst *incusapi.Instance) instApply {
	out := instApply{Outputs: instanceOut{Name: s.Name, Type: s.Type}}
	if inst == nil {
		logf(c, "instance %s is already absent", s.Name)
		return out
	}
	if d := guardDelete(c, s, inst, time.Now()); d.HasErrors() {
		return instApply{Diagnostics: d}
	}
	if err := deleteInstance(ctx, c, s.Name, inst); err != nil {
		return instApply{Diagnostics: apiErr(c, "Cannot Delete Instance", err)}
	}
	logf(c, "instance %s deleted; this cannot be undone, rollback leaves it deleted", s.Name)
	out.Outputs = instanceOut{Name: s.Name, Type: inst.Type}
	return out
}

// deleteInstance stops an instance by force when it runs, then deletes it.
func deleteInstance(ctx context.Context, c *call, name string, inst *incusapi.Instance) error {
	if inst.Status != "Stopped" {
		if err := setState(ctx, c, name, incusapi.InstanceStatePut{Action: "stop", Force: true}); err != nil {
			return err
		}
	}
	err := c.Settings.c.DeleteInstance(ctx, name)
	if incusapi.IsNotFound(err) {
		return nil
	}
	return err
}

// --- revert

func revertInstance(ctx context.Context, c *call, a InstanceSpec, u sdk.Applied[instanceRevert]) phases.Diagnostics {
	inv := u.Data
	name := pick(inv.Instance, orDefault(a.Name, c.Addr.Name))
	switch inv.Op {
	case "none":
		return nil
	case "delete":
		inst, _, err := getInstance(ctx, c, name)
		if err != nil {
			return apiErr(c, "Cannot Read Instance", err)
		}
		if inst == nil {
			logf(c, "instance %s is already gone", name)
			return nil
		}
		if err := deleteInstance(ctx, c, name, inst); err != nil {
			return apiErr(c, "Cannot Delete Instance", err)
		}
		logf(c, "instance %s deleted", name)
		return nil
	case "restore":
		return restoreInstance(ctx, c, name, inv)
	}
	return errorf("Invalid Revert", "The revert data of %s has an unknown operation %q.", c.Addr, inv.Op)
}

func restoreInstance(ctx context.Context, c *call, name string, inv instanceRevert) phases.Diagnostics {
	var diags phases.Diagnostics
	for attempt := 1; ; attempt++ {
		inst, etag, err := getInstance(ctx, c, name)
		if err != nil {
			return apiErr(c, "Cannot Read Instance", err)
		}
		if inst == nil {
			return unknownInstance(c, name, " Its previous settings cannot be restored.")
		}
		put := inst.Put()
		put.Config = maps.Clone(inst.Config)
		if put.Config == nil {
			put.Config = map[string]string{}
		}
		put.Devices = maps.Clone(inst.Devices)
		if put.Devices == nil {
			put.Devices = map[string]map[string]string{}
		}
		for k, v := range inv.Config {
			if v == nil {
				delete(put.Config, k)
			} else {
				put.Config[k] = *v
			}
		}
		for k, v := range inv.Devices {
			if v == nil {
				delete(put.Devices, k)
			} else {
				put.Devices[k] = v
			}
		}
		if inv.SetProfiles {
			put.Profiles = inv.Profiles
		}
		err = c.Settings.c.UpdateInstance(ctx, name, put, etag)
		if errors.Is(err, incusapi.ErrConflict) && attempt < 3 {
			continue // changed between our read and write: read again
		}
		if err != nil {
			return apiErr(c, "Cannot Restore Instance", err)
		}
		break
	}
	logf(c, "instance %s: previous config and devices restored", name)
	if len(inv.NotKept) > 0 {
		diags = append(diags, phases.Diagnostic{Severity: phases.Warning, Summary: "Sensitive Settings Not Restored",
			Detail: fmt.Sprintf("The previous values of %s on instance %s were sensitive, so the state did not keep them; they keep the runbook's values.", strings.Join(inv.NotKept, ", "), name)})
	}
	return diags
}
