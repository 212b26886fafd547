package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/fake"
	"github.com/homelab-migrate/migrate/state"
)

// inGroup is the fake step NAME of the group call CALL's instance KEY
// ("" for a call without for_each): group.CALL["KEY"].fake_step.NAME.
func inGroup(call, key, name string) phases.Address {
	return phases.Address{Group: call, GroupKey: key, Type: fake.StepType, Name: name}
}

// groupSteps adds, as the loader would for a call "svc" of a group
// with for_each over keys, the steps of each instance: volume, and app
// that refers to it (both in the instance; app sorts first, so that only
// the dependency orders them); after, in the phase, depends on the app
// of every instance.
func groupSteps(b *rb, p *phases.Phase, keys ...string) {
	after := mkStep(p, "after", value("after"))
	for _, k := range keys {
		vol := &phases.Step{Addr: inGroup("svc", k, "volume"), Phase: p.Name, Provider: "fake.default", Config: value("volume " + k)}
		app := &phases.Step{Addr: inGroup("svc", k, "app"), Phase: p.Name, Provider: "fake.default", Config: value("app " + k),
			DependsOn: []phases.Address{vol.Addr}}
		p.Steps = append(p.Steps, vol, app)
		after.DependsOn = append(after.DependsOn, app.Addr)
	}
	p.Steps = append(p.Steps, after)
	// The call's declarations, without its key: what the steps of an
	// instance whose key left the call's for_each are reverted with. The
	// loader makes them from one instance's ("a", here even when it is
	// gone): its attributes and the steps it names are that instance's.
	p.ForEach = append(p.ForEach,
		&phases.Step{Addr: inGroup("svc", "", "volume"), Phase: p.Name, Provider: "fake.default", Config: value("volume a")},
		&phases.Step{Addr: inGroup("svc", "", "app"), Phase: p.Name, Provider: "fake.default", Config: value("app a"),
			DependsOn: []phases.Address{inGroup("svc", "a", "volume")}})
}

// TestGroupStepsRunResumeRollback: steps of group call instances
// (group.svc["a"].fake_step.volume) are planned, run, resumed and rolled back
// under their whole address, kept in the state under it (as the key of
// the snapshot's map and the record's address), and their outputs are
// what the steps that refer to them see.
func TestGroupStepsRunResumeRollback(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("apps")
	groupSteps(b, p, "a", "b")
	failing := inGroup("svc", "b", "app").String()
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		if req.Addr.String() == failing {
			return providers.ApplyResponse{Diagnostics: phases.Errorf("Boom", "%s broke", req.Addr)}
		}
		return providers.ApplyResponse{Outputs: cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal(req.Addr.String())}),
			Revert: &providers.RevertData{Description: "undo fake"}}
	}

	e, st := h.open(b.r)
	plan := mustPlan(t, e)
	var planned []string
	for _, sp := range plan.Phases[0].Steps {
		planned = append(planned, sp.Addr.String()+" "+string(sp.ReasonCode))
		if sp.Group != sp.Addr.GroupPrefix() {
			t.Errorf("%s is planned in the group %q, want %q", sp.Addr, sp.Group, sp.Addr.GroupPrefix())
		}
	}
	slices.Sort(planned)
	want := []string{
		`fake_step.after never_ran`,
		`group.svc["a"].fake_step.app never_ran`, `group.svc["a"].fake_step.volume never_ran`,
		`group.svc["b"].fake_step.app never_ran`, `group.svc["b"].fake_step.volume never_ran`,
	}
	if !slices.Equal(planned, want) {
		t.Fatalf("plan = %q, want %q", planned, want)
	}
	// A saved plan reads back the same, addresses and all.
	path := filepath.Join(t.TempDir(), "plan")
	if err := engine.WritePlan(path, plan); err != nil {
		t.Fatal(err)
	}
	if saved, err := engine.ReadPlan(path); err != nil || !reflect.DeepEqual(saved, plan) {
		t.Fatalf("the saved plan reads back as %+v (%v), want %+v", saved, err, plan)
	}
	err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{})
	var pe *engine.PhaseError
	if !errors.As(err, &pe) || len(pe.Failed) != 1 || pe.Failed[0] != inGroup("svc", "b", "app") || len(pe.Skipped) != 1 || pe.Skipped[0] != addr("after") {
		t.Fatalf("run: %v, want group.svc[\"b\"].fake_step.app failed and fake_step.after skipped", err)
	}
	st.Close()
	// Events say the group call instance (--json's "group").
	for _, ev := range h.events {
		if ev.Kind == engine.StepDone && ev.Group != ev.Addr.GroupPrefix() {
			t.Errorf("%s %s: group %q, want %q", ev.Kind, ev.Addr, ev.Group, ev.Addr.GroupPrefix())
		}
	}
	if !slices.ContainsFunc(h.events, func(ev engine.Event) bool { return ev.Group == `group.svc["a"]` && ev.Kind == engine.StepDone }) {
		t.Error(`no step_done event in the group group.svc["a"]`)
	}

	// The state file keys the records by the whole address.
	var doc struct {
		Steps map[string]struct {
			Address string `json:"address"`
			Status  string `json:"status"`
		} `json:"steps"`
	}
	raw, err := os.ReadFile(filepath.Join(h.dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for key, status := range map[string]string{`group.svc["a"].fake_step.app`: "done", `group.svc["b"].fake_step.volume`: "done", failing: "failed"} {
		if r, ok := doc.Steps[key]; !ok || r.Address != key || r.Status != status {
			t.Errorf("state.json step %s = %+v (%v), want address %s, status %s:\n%s", key, r, ok, key, status, raw)
		}
	}

	// Fixed: the next run does only what is left, under the same names.
	h.fake.ApplyFn = nil
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{`group.svc["a"].fake_step.volume`, `group.svc["b"].fake_step.volume`, failing, "fake_step.after"} {
		n := 1
		if a == failing {
			n = 2
		}
		if got := h.fake.Applied(a); got != n {
			t.Errorf("%s applied %d times, want %d", a, got, n)
		}
	}

	// A plan now has nothing to do: every record is found by its address.
	e, st = h.open(b.r)
	for _, sp := range mustPlan(t, e).Phases[0].Steps {
		if sp.Action != providers.NoOp {
			t.Errorf("after the run, %s is planned %s (%s)", sp.Addr, sp.Action, sp.ReasonCode)
		}
	}
	st.Close()

	// Rollback undoes every step of every instance, app before its volume.
	rp, err := h.rollback(b.r)
	if err != nil {
		t.Fatal(err)
	}
	var reverts []string
	for _, r := range rp.Phases[0].Revert {
		reverts = append(reverts, r.Addr.String())
	}
	for _, k := range []string{"a", "b"} {
		y, x := slices.Index(reverts, inGroup("svc", k, "app").String()), slices.Index(reverts, inGroup("svc", k, "volume").String())
		if x < 0 || y < 0 || y > x {
			t.Errorf("rollback plan %q: want group.svc[%q]'s app undone before its volume", reverts, k)
		}
	}
	for _, a := range []phases.Address{inGroup("svc", "a", "volume"), inGroup("svc", "b", "app"), addr("after")} {
		if n := h.fake.Reverted(a.String()); n != 1 {
			t.Errorf("%s reverted %d times, want 1", a, n)
		}
	}
}

// TestGroupInstanceRemoved: a key that leaves a group call's for_each
// takes the call's instance away: each of its steps that did something
// is planned for revert (reason group_removed, naming the step), app
// before volume as in a rollback, the saved plan is accepted, and run
// undoes them with their revert data and leaves the other instances
// alone. A step's own for_each key removed inside an instance that is
// still there is key_removed, as outside a group, whether its block is
// declared for the instance or only for the call.
func TestGroupInstanceRemoved(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	build := func(keys []string, zKeys ...string) *phases.Runbook {
		b := newRB()
		p := b.phase("apps")
		groupSteps(b, p, keys...)
		// z has a for_each of its own, in every instance; its block is
		// declared for the instance "a" (and, as every step of the
		// call, without the call's key, which the others fall back on).
		for _, gk := range keys {
			for _, k := range zKeys {
				p.Steps = append(p.Steps, &phases.Step{Addr: keyed(inGroup("svc", gk, "z"), k), Phase: p.Name, Provider: "fake.default", Config: value("z " + k)})
			}
		}
		p.ForEach = append(p.ForEach,
			&phases.Step{Addr: inGroup("svc", "a", "z"), Phase: p.Name, Provider: "fake.default", Config: value("z")},
			&phases.Step{Addr: inGroup("svc", "", "z"), Phase: p.Name, Provider: "fake.default", Config: value("z")})
		return b.r
	}
	if err := h.run(build([]string{"a", "b", "c"}, "k1", "k2")); err != nil {
		t.Fatal(err)
	}
	after := build([]string{"a", "c"}, "k1")
	e, st := h.open(after)
	plan := mustPlan(t, e)
	got := map[string]*engine.StepPlan{}
	var order []string
	for _, sp := range plan.Phases[0].Steps {
		got[sp.Addr.String()] = sp
		order = append(order, sp.Addr.String())
	}
	bx, by := inGroup("svc", "b", "volume"), inGroup("svc", "b", "app")
	gone := []phases.Address{bx, by, keyed(inGroup("svc", "b", "z"), "k1"), keyed(inGroup("svc", "b", "z"), "k2")}
	for _, a := range gone {
		sp := got[a.String()]
		if sp == nil || sp.Action != providers.Revert || sp.ReasonCode != engine.GroupRemoved || len(sp.Why.By) != 1 || sp.Why.By[0] != a.Base() {
			t.Errorf("%s: planned %+v, want revert group_removed by %s (plan %q)", a, sp, a.Base(), order)
		}
	}
	keyRemoved := []phases.Address{keyed(inGroup("svc", "a", "z"), "k2"), keyed(inGroup("svc", "c", "z"), "k2")}
	for _, a := range keyRemoved {
		if sp := got[a.String()]; sp == nil || sp.Action != providers.Revert || sp.ReasonCode != engine.KeyRemoved || len(sp.Why.By) != 1 || sp.Why.By[0] != a.Base() {
			t.Errorf("%s: planned %+v, want revert key_removed by %s (plan %q)", a, sp, a.Base(), order)
		}
	}
	kept := []string{`group.svc["a"].fake_step.volume`, `group.svc["a"].fake_step.app`, `group.svc["c"].fake_step.app`, `group.svc["a"].fake_step.z["k1"]`, `group.svc["c"].fake_step.z["k1"]`, "fake_step.after"}
	for _, a := range kept {
		if sp := got[a]; sp == nil || sp.Action != providers.NoOp {
			t.Errorf("%s: planned %+v, want unchanged", a, sp)
		}
	}
	if err := e.CheckSavedPlan(context.Background(), plan); err != nil {
		t.Fatalf("the plan's reverts were refused as a saved plan: %v", err)
	}
	// A removed instance's steps are not reverted with another
	// instance's attributes (the declaration's): their revert data says
	// what to undo.
	h.fake.RevertFn = func(_ context.Context, req providers.RevertRequest) providers.RevertResponse {
		if req.Addr.GroupKey == "b" && req.Config.IsWhollyKnown() {
			t.Errorf("%s reverted with the attributes %#v, of another instance", req.Addr, req.Config)
		}
		return providers.RevertResponse{}
	}
	if err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	for _, a := range append(gone, keyRemoved...) {
		if n := h.fake.Reverted(a.String()); n != 1 {
			t.Errorf("%s reverted %d times, want 1", a, n)
		}
	}
	for _, a := range kept {
		if n := h.fake.Reverted(a); n != 0 {
			t.Errorf("%s reverted %d times, want none: its instance and key are still there", a, n)
		}
	}
	// The removed instance's app depends on its volume: undone first.
	var reverted []string
	for _, ev := range h.events {
		if ev.Kind == engine.StepReverted {
			reverted = append(reverted, ev.Addr.String())
		}
	}
	if i, j := slices.Index(reverted, by.String()), slices.Index(reverted, bx.String()); i < 0 || j < 0 || i > j {
		t.Errorf("reverted in the order %q: want %s before %s", reverted, by, bx)
	}
	e, st = h.open(after)
	for _, sp := range mustPlan(t, e).Phases[0].Steps {
		if sp.Action != providers.NoOp {
			t.Errorf("once reverted, %s is planned %s (%s)", sp.Addr, sp.Action, sp.ReasonCode)
		}
	}
	st.Close()
}

func keyed(a phases.Address, key string) phases.Address {
	a.Key = key
	return a
}

// TestRollbackUndoesARemovedGroupInstance: a rollback undoes the steps
// of a group call instance whose key left the for_each, as it does an
// instance of a for_each step.
func TestRollbackUndoesARemovedGroupInstance(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	build := func(keys ...string) *phases.Runbook {
		b := newRB()
		groupSteps(b, b.phase("apps"), keys...)
		return b.r
	}
	if err := h.run(build("a", "b")); err != nil {
		t.Fatal(err)
	}
	rp, err := h.rollback(build("a"))
	if err != nil {
		t.Fatal(err)
	}
	var reverts []string
	for _, r := range rp.Phases[0].Revert {
		reverts = append(reverts, r.Addr.String())
	}
	for _, a := range []phases.Address{inGroup("svc", "a", "volume"), inGroup("svc", "b", "volume"), inGroup("svc", "b", "app"), addr("after")} {
		if !slices.Contains(reverts, a.String()) {
			t.Errorf("the rollback plan %q does not undo %s", reverts, a)
		}
		if n := h.fake.Reverted(a.String()); n != 1 {
			t.Errorf("%s reverted %d times, want 1", a, n)
		}
	}
	// The removed instance's steps keep their dependency: app first.
	if i, j := slices.Index(reverts, `group.svc["b"].fake_step.app`), slices.Index(reverts, `group.svc["b"].fake_step.volume`); i > j {
		t.Errorf("the rollback plan %q undoes group.svc[\"b\"]'s volume before its app, which depends on it", reverts)
	}
}

// TestMovedIntoAndOutOfGroups: moved blocks carry a record into a group
// (fake_step.a to group.g.fake_step.a), into an instance of a call with
// for_each (group.g["k"].fake_step.a) and out of it again; the step is
// never applied again, and the state keys the record under its last
// address.
func TestMovedIntoAndOutOfGroups(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	at := func(to phases.Address, moved ...*phases.Moved) *phases.Runbook {
		b := newRB()
		p := b.phase("main")
		p.Steps = append(p.Steps, &phases.Step{Addr: to, Phase: p.Name, Provider: "fake.default", Config: value("a")})
		b.r.Moved = moved
		return b.r
	}
	// What the step made is there whatever its name (the fake reads by address).
	h.fake.ReadFn = func(context.Context, providers.ReadRequest) providers.ReadResponse {
		return providers.ReadResponse{Observation: providers.Present}
	}
	if err := h.run(at(addr("a"))); err != nil {
		t.Fatal(err)
	}
	plain, grouped, keyed := addr("a"), inGroup("g", "", "a"), inGroup("g", "k", "a")
	for _, m := range [][2]phases.Address{{plain, grouped}, {grouped, keyed}, {keyed, plain}} {
		r := at(m[1], &phases.Moved{From: m[0], To: m[1]})
		e, st := h.open(r)
		plan := mustPlan(t, e)
		if len(plan.Moved) != 1 || plan.Moved[0] != (engine.Move{From: m[0], To: m[1]}) {
			t.Fatalf("%s to %s: plan.Moved = %+v", m[0], m[1], plan.Moved)
		}
		if sp := plan.Phases[0].Steps[0]; sp.Action != providers.NoOp || sp.MovedFrom == nil || *sp.MovedFrom != m[0] {
			t.Fatalf("%s to %s: planned %+v, want unchanged, moved from %s", m[0], m[1], sp, m[0])
		}
		if err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{}); err != nil {
			t.Fatal(err)
		}
		st.Close()
		st2, err := state.Open(h.dir, state.Options{})
		if err != nil {
			t.Fatal(err)
		}
		snap := st2.Snapshot()
		st2.Close()
		if rec := snap.Steps[m[1].String()]; rec == nil || rec.Addr != m[1] || rec.Status != state.Done || snap.Steps[m[0].String()] != nil {
			t.Fatalf("%s to %s: records %v", m[0], m[1], snap.Steps)
		}
	}
	if n := h.fake.Applied("fake_step.a") + h.fake.Applied(grouped.String()) + h.fake.Applied(keyed.String()); n != 1 {
		t.Errorf("applied %d times, want once: the moves carry its record", n)
	}
	if !strings.Contains(mustRead(t, filepath.Join(h.dir, "state.json")), `"fake_step.a"`) {
		t.Error("state.json does not key the record fake_step.a after it moved back")
	}
}

// TestRollbackOfAnEarlierPhaseWaitsForARemovedGroupInstance: a later
// phase whose only records are of a group call instance whose key left
// the for_each still has something to undo: rolling back the phase
// before it alone is refused, as when its own steps are done.
func TestRollbackOfAnEarlierPhaseWaitsForARemovedGroupInstance(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	build := func(keys ...string) *phases.Runbook {
		b := newRB()
		b.step(b.phase("first"), "base")
		p := b.phase("apps")
		groupSteps(b, p, keys...)
		p.Steps = slices.DeleteFunc(p.Steps, func(s *phases.Step) bool { return s.Addr == addr("after") })
		return b.r
	}
	if err := h.run(build("a")); err != nil {
		t.Fatal(err)
	}
	_, err := h.rollback(build(), "first")
	if err == nil || !strings.Contains(err.Error(), "phase apps runs after first and has not been rolled back") {
		t.Fatalf("rollback of first alone: %v, want refused: apps has group.svc[\"a\"] to undo", err)
	}
	if n := h.fake.Reverted("fake_step.base"); n != 0 {
		t.Errorf("fake_step.base reverted %d times, want none", n)
	}
	if _, err := h.rollback(build()); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"fake_step.base", `group.svc["a"].fake_step.app`, `group.svc["a"].fake_step.volume`} {
		if n := h.fake.Reverted(a); n != 1 {
			t.Errorf("%s reverted %d times, want 1", a, n)
		}
	}
}
