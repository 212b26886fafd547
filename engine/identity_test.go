package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/fake"
	"github.com/homelab-migrate/migrate/views"
)

// world is what the fake steps of these tests act on: a VM that can be
// made, deleted and made again (each time with a new identity), and a
// copy's destination.
type world struct {
	mu      sync.Mutex
	vm      string // the VM's identity; "" when there is none
	made    int
	dest    string
	applied map[string]int
}

func (w *world) apply(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.applied == nil {
		w.applied = map[string]int{}
	}
	w.applied[name]++
	switch name {
	case "vm":
		w.made++
		w.vm = fmt.Sprintf("uuid-%d", w.made)
	case "delete":
		w.vm = ""
	}
}

func (w *world) count(name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.applied[name]
}

// replacedWorld: vm (its identity the VM's), config and bootstrap on it
// (no identity of their own, no revert data, Present once applied, as
// talos_bootstrap is): bootstrap's record is proof only about the VM it
// was made on.
func replacedWorld(t *testing.T) (*harness, *rb, *world) {
	h := newHarness(t)
	b := newRB()
	p := b.phase("platform")
	b.step(p, "vm")
	b.step(p, "config", "vm")
	b.step(p, "bootstrap", "config")
	w := &world{}
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		w.apply(req.Addr.Name)
		resp := providers.ApplyResponse{Outputs: cty.EmptyObjectVal}
		if req.Addr.Name == "vm" {
			resp.Identity = w.vm
			resp.Revert = &providers.RevertData{Description: "delete the VM"}
		}
		return resp
	}
	h.fake.RevertFn = func(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
		if req.Addr.Name == "vm" {
			w.mu.Lock()
			w.vm = ""
			w.mu.Unlock()
		}
		return providers.RevertResponse{}
	}
	h.fake.ReadFn = func(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
		w.mu.Lock()
		defer w.mu.Unlock()
		if req.Addr.Name == "vm" {
			if w.vm == "" {
				return providers.ReadResponse{Observation: providers.Absent}
			}
			return providers.ReadResponse{Observation: providers.Present, Identity: w.vm}
		}
		return providers.PresentIfPrior(req)
	}
	return h, b, w
}

// TestRecordOfAReplacedWorldIsNoProof: the VM is rolled back (deleted)
// and made again; a run that stopped right after the VM and the config
// were made anew, before the bootstrap, leaves the bootstrap's record of
// the old VM. The next plan must not take it as done on the new one: it
// plans the bootstrap, saying why, and the run bootstraps again.
func TestRecordOfAReplacedWorldIsNoProof(t *testing.T) {
	t.Parallel()
	h, b, w := replacedWorld(t)
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	if _, err := h.rollback(b.r); err != nil {
		t.Fatal(err)
	}
	// Again, stopped once the config is being applied: the VM (new
	// identity) and the config are done, the bootstrap not started.
	stop, stopNow := context.WithCancel(context.Background())
	inner := h.fake.ApplyFn
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		if req.Addr.Name == "config" {
			stopNow()
		}
		return inner(ctx, req)
	}
	e, st := h.open(b.r)
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	if err := e.Run(stop, context.Background(), plan, engine.RunOptions{}); err != engine.ErrInterrupted {
		t.Fatalf("the stopped run: %v", err)
	}
	st.Close()
	h.fake.ApplyFn = inner
	if w.count("vm") != 2 || w.count("config") != 2 || w.count("bootstrap") != 1 {
		t.Fatalf("applies before the resume: %v", w.applied)
	}

	e, st = h.open(b.r)
	plan, diags = e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	sp := stepPlanNamed(t, plan, "bootstrap")
	if sp.Action != providers.Create || !strings.Contains(views.Because(sp.ReasonCode, sp.Why), "fake_step.config was made again since this step ran") {
		t.Errorf("the bootstrap's plan after the VM was replaced: %s %q", sp.Action, views.Because(sp.ReasonCode, sp.Why))
	}
	if sp := stepPlanNamed(t, plan, "vm"); sp.Action != providers.NoOp {
		t.Errorf("the new VM is planned %s: %q", sp.Action, views.Because(sp.ReasonCode, sp.Why))
	}
	if err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if w.count("bootstrap") != 2 || w.count("vm") != 2 {
		t.Errorf("applies after the resume: %v, want the bootstrap twice (once per VM), the VM twice", w.applied)
	}
	// Now the records describe the new VM: nothing to do.
	e, st = h.open(b.r)
	defer st.Close()
	plan, diags = e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	if plan.HasChanges() {
		t.Errorf("a plan after the resume has changes: %+v", stepPlanNamed(t, plan, "bootstrap"))
	}
}

// TestDependencyMadeAgainInTheRunSendsDependentsBackToPlanning: the VM is
// planned to be made again, the bootstrap (done, its inputs unchanged,
// Present) is planned to be read again after it; once the VM is new, the
// bootstrap's record no longer holds and it runs, with a StepPlanned
// event saying why.
func TestDependencyMadeAgainInTheRunSendsDependentsBackToPlanning(t *testing.T) {
	t.Parallel()
	h, b, w := replacedWorld(t)
	b.r.Phases[0].Steps[2].DependsOn = append(b.r.Phases[0].Steps[2].DependsOn, addr("vm"))
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	if _, err := h.rollback(b.r); err != nil {
		t.Fatal(err)
	}
	// The config did not undo anything, but its inputs change: it runs
	// in this run too. The bootstrap's do not.
	e, st := h.open(b.r)
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	sp := stepPlanNamed(t, plan, "bootstrap")
	if sp.Action != providers.NoOp || len(sp.Recheck) == 0 {
		t.Errorf("the bootstrap's plan before the VM is made again: %s, recheck %v", sp.Action, sp.Recheck)
	}
	h.events = nil
	if err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if w.count("bootstrap") != 2 {
		t.Errorf("the bootstrap ran %d times, want twice: once per VM", w.count("bootstrap"))
	}
	said := false
	for _, ev := range h.events {
		said = said || ev.Kind == engine.StepPlanned && ev.Addr == addr("bootstrap") && ev.Why != nil && strings.Contains(views.Because(ev.ReasonCode, *ev.Why), "was made again since this step ran")
	}
	if !said {
		t.Error("no step_planned event says why the bootstrap runs again")
	}
}

// TestDeletePlannedBeforeWhatItDeletesExists: after a rollback, the VM is
// made again in the run, and the deletion at the end of the phase (done
// last time: "already absent" when planned) is read again once the steps
// before it ran: the VM is there, so it deletes it. No identities here:
// the re-read alone does it.
func TestDeletePlannedBeforeWhatItDeletesExists(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("rehearsal")
	b.step(p, "vm")
	b.step(p, "probe", "vm")
	b.step(p, "delete", "probe")
	w := &world{}
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		w.apply(req.Addr.Name)
		resp := providers.ApplyResponse{Outputs: cty.EmptyObjectVal}
		if req.Addr.Name == "vm" {
			resp.Revert = &providers.RevertData{Description: "delete the VM"}
		}
		return resp
	}
	h.fake.RevertFn = func(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
		return providers.RevertResponse{} // the VM is gone already
	}
	h.fake.ReadFn = func(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
		w.mu.Lock()
		defer w.mu.Unlock()
		if req.Addr.Name == "delete" && req.Prior != nil {
			if w.vm != "" {
				return providers.ReadResponse{Observation: providers.Absent, Detail: "the VM exists"}
			}
			return providers.ReadResponse{Observation: providers.Present}
		}
		return providers.PresentIfPrior(req)
	}
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	if _, err := h.rollback(b.r); err != nil {
		t.Fatal(err)
	}
	e, st := h.open(b.r)
	defer st.Close()
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	if sp := stepPlanNamed(t, plan, "delete"); sp.Action != providers.NoOp || len(sp.Recheck) != 1 || sp.Recheck[0] != addr("probe") {
		t.Errorf("the deletion's plan: %s, recheck %v; want unchanged for now, read again after fake_step.probe", sp.Action, sp.Recheck)
	}
	if err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	if w.vm != "" {
		t.Errorf("the VM made again is left: %q (deletion applied %d times)", w.vm, w.count("delete"))
	}
	if w.count("delete") != 2 || w.count("probe") != 1 {
		t.Errorf("applies: %v; want the deletion twice, the probe (still there) once", w.applied)
	}
}

// TestStepsTheRunbookChangesAreRebased: a copy whose destination the next
// step (a restore) changes on purpose is read again before the restore
// is recorded, and what is there becomes its record: the next plan calls
// nothing drifted. A change from outside afterwards is drift, and says
// what changed.
func TestStepsTheRunbookChangesAreRebased(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	schema := fake.Schema()
	copyType := schema.StepTypes[fake.StepType]
	copyType.Rebase = true
	schema.StepTypes["fake_copy"] = copyType
	h.fake.SchemaResp = schema
	b := newRB()
	p := b.phase("matrix")
	cp := b.step(p, "copy")
	cp.Addr.Type = "fake_copy"
	restore := b.step(p, "restore")
	restore.DependsOn = []phases.Address{cp.Addr}
	w := &world{}
	baseline := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		w.mu.Lock()
		defer w.mu.Unlock()
		resp := providers.ApplyResponse{Outputs: cty.EmptyObjectVal}
		switch req.Addr.Name {
		case "copy":
			w.dest = "copied"
			resp.Private = baseline(w.dest)
		case "restore":
			w.dest = "restored, owned by synapse"
		}
		return resp
	}
	var rebased int
	h.fake.ReadFn = func(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
		w.mu.Lock()
		defer w.mu.Unlock()
		if req.Addr.Name != "copy" {
			return providers.PresentIfPrior(req)
		}
		if req.Rebase {
			rebased++
			return providers.ReadResponse{Observation: providers.Present, Private: baseline(w.dest)}
		}
		if req.Prior == nil || string(req.Prior.Private) != string(baseline(w.dest)) {
			return providers.ReadResponse{Observation: providers.Drifted, Detail: "the destination changed from outside: " + w.dest}
		}
		return providers.ReadResponse{Observation: providers.Present}
	}
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	if rebased != 1 {
		t.Errorf("the copy was read again %d times after the restore, want once", rebased)
	}
	plan := func() *engine.Plan {
		e, st := h.open(b.r)
		defer st.Close()
		plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
		if diags.HasErrors() {
			t.Fatal(diags.Err())
		}
		return plan
	}
	if sp := stepPlanNamed(t, plan(), "copy"); sp.Action != providers.NoOp {
		t.Errorf("after the restore, the copy is planned %s: %q", sp.Action, views.Because(sp.ReasonCode, sp.Why))
	}
	w.mu.Lock()
	w.dest = "deleted by someone"
	w.mu.Unlock()
	if sp := stepPlanNamed(t, plan(), "copy"); sp.Action != providers.Drift || !strings.Contains(views.Because(sp.ReasonCode, sp.Why), "changed from outside: deleted by someone") {
		t.Errorf("after a change from outside, the copy is planned %s: %q", sp.Action, views.Because(sp.ReasonCode, sp.Why))
	}
}

// stepPlanNamed finds a step's plan by name, whatever its type.
func stepPlanNamed(t *testing.T, p *engine.Plan, name string) *engine.StepPlan {
	t.Helper()
	for _, ph := range p.Phases {
		for _, sp := range ph.Steps {
			if sp.Addr.Name == name {
				return sp
			}
		}
	}
	t.Fatalf("no plan for %s", name)
	return nil
}

// TestRecheckAcrossPhases: the deletion is in a later phase, complete and
// otherwise unchanged; the VM it deletes is made again in the earlier
// phase of the same run. The later phase still runs, for the re-read.
func TestRecheckAcrossPhases(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	b.step(b.phase("make"), "vm")
	b.step(b.phase("clean"), "delete", "vm")
	w := &world{}
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		w.apply(req.Addr.Name)
		resp := providers.ApplyResponse{Outputs: cty.EmptyObjectVal}
		if req.Addr.Name == "vm" {
			resp.Revert = &providers.RevertData{Description: "delete the VM"}
		}
		return resp
	}
	h.fake.RevertFn = func(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
		return providers.RevertResponse{}
	}
	h.fake.ReadFn = func(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
		w.mu.Lock()
		defer w.mu.Unlock()
		if req.Addr.Name == "delete" && req.Prior != nil && w.vm != "" {
			return providers.ReadResponse{Observation: providers.Absent, Detail: "the VM exists"}
		}
		return providers.PresentIfPrior(req)
	}
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	if _, err := h.rollback(b.r); err != nil {
		t.Fatal(err)
	}
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	if w.vm != "" || w.count("delete") != 2 {
		t.Errorf("after the second run the VM is %q, the deletion ran %d times; want it deleted again", w.vm, w.count("delete"))
	}
}

// TestUnreadableUntilItsWorldIsMadeAgain: after a rollback the VM is gone
// while the config and the bootstrap (which rollback cannot undo) stay
// done, and asking about them fails: their node does not answer. The
// plan of the next run is no error: they are read again once the VM is
// made again, and, their world replaced, run again.
func TestUnreadableUntilItsWorldIsMadeAgain(t *testing.T) {
	t.Parallel()
	h, b, w := replacedWorld(t)
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	if _, err := h.rollback(b.r); err != nil {
		t.Fatal(err)
	}
	inner := h.fake.ReadFn
	h.fake.ReadFn = func(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
		w.mu.Lock()
		gone := w.vm == ""
		w.mu.Unlock()
		if req.Addr.Name != "vm" && gone {
			return providers.ReadResponse{Diagnostics: phases.Errorf("Cannot Reach Talos", "dial tcp 192.168.1.50:50000: connection refused")}
		}
		return inner(ctx, req)
	}
	e, st := h.open(b.r)
	defer st.Close()
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatalf("the plan failed on what the run makes again first: %v", diags.Err())
	}
	for _, name := range []string{"config", "bootstrap"} {
		if sp := stepPlanNamed(t, plan, name); sp.Action == providers.NoOp && len(sp.Recheck) == 0 {
			t.Errorf("%s: %s %q, want it read again after the VM", name, sp.Action, views.Because(sp.ReasonCode, sp.Why))
		}
	}
	if err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	if w.count("vm") != 2 || w.count("config") != 2 || w.count("bootstrap") != 2 {
		t.Errorf("applies: %v, want each twice (the new VM configured and bootstrapped)", w.applied)
	}
}
