package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/views"
)

// TestRollbackSkipsWhatWentWithADiscardingStep: steps made inside a
// throwaway VM (vm, job) whose deletion (delete) discards them are not
// undone once the deletion is done: no provider is asked (their host is
// gone), the plan says so, and they end reverted. The VM's own revert
// and the steps outside it run as usual.
func TestRollbackSkipsWhatWentWithADiscardingStep(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("rehearsal")
	b.step(p, "iso")
	b.step(p, "vm", "iso")
	b.step(p, "job", "vm")
	del := b.step(p, "delete", "job")
	del.Discards = []phases.Address{addr("job")}
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		resp := providers.ApplyResponse{Outputs: cty.EmptyObjectVal, Revert: &providers.RevertData{Description: "undo " + req.Addr.Name}}
		if req.Addr.Name == "delete" {
			resp.Revert = nil // a deletion cannot be undone
		}
		return resp
	}
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	h.fake.RevertFn = func(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, req.Addr.Name)
		if req.Addr.Name == "job" {
			return providers.RevertResponse{Diagnostics: phases.Errorf("Cannot Reach Cluster", "dial tcp: connection refused")}
		}
		return providers.RevertResponse{}
	}
	rp, err := h.rollback(b.r)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, " "); got != "vm iso" {
		t.Errorf("reverted through the provider: %q, want \"vm iso\"", got)
	}
	var gone []string
	for _, r := range rp.Phases[0].Revert {
		if r.GoneWith != nil {
			gone = append(gone, r.Addr.Name+" with "+r.GoneWith.String()+": "+r.Description)
		}
	}
	if len(gone) != 1 || gone[0] != "job with fake_step.delete: nothing to undo: it went with fake_step.delete" {
		t.Errorf("the plan's entries gone with a step: %q", gone)
	}
	if irr := rp.Irreversible(); len(irr) != 1 || irr[0] != addr("delete") {
		t.Errorf("irreversible = %v", irr)
	}
	for _, n := range []string{"iso", "vm", "job"} {
		if s := h.status(n); s != state.Reverted {
			t.Errorf("%s is %s after the rollback", n, s)
		}
	}
	said := false
	for _, ev := range h.events {
		said = said || ev.Kind == engine.StepReverted && ev.Addr == addr("job") && ev.Why != nil && strings.Contains(views.Because(ev.ReasonCode, *ev.Why), "went with fake_step.delete")
	}
	if !said {
		t.Error("no event says why job was not undone")
	}
}

// TestDiscardedStepsRevertWhenTheDiscardingStepDidNotRun: the deletion
// failed (the VM and what is in it still exist): everything is undone
// through the provider.
func TestDiscardedStepsRevertWhenTheDiscardingStepDidNotRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("rehearsal")
	b.step(p, "vm")
	b.step(p, "job", "vm")
	del := b.step(p, "delete", "job")
	del.Discards = []phases.Address{addr("job")}
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		if req.Addr.Name == "delete" {
			return providers.ApplyResponse{Diagnostics: phases.Errorf("Cannot Delete", "busy")}
		}
		return providers.ApplyResponse{Outputs: cty.EmptyObjectVal, Revert: &providers.RevertData{Description: "undo " + req.Addr.Name}}
	}
	if err := h.run(b.r); err == nil {
		t.Fatal("the run succeeded")
	}
	if _, err := h.rollback(b.r); err != nil {
		t.Fatal(err)
	}
	if h.fake.Reverted("fake_step.job") != 1 || h.fake.Reverted("fake_step.vm") != 1 {
		t.Errorf("reverts: job=%d vm=%d, want 1 each", h.fake.Reverted("fake_step.job"), h.fake.Reverted("fake_step.vm"))
	}
}

// TestStepsGoingWithADiscarderInFlightAreNotAsked: a run was killed while
// the VM's deletion ran (the VM half-deleted); what the deletion discards
// (a job inside the VM) is done, and its provider cannot be asked any
// more. The next plan and run do not ask it: the deletion resumes.
func TestStepsGoingWithADiscarderInFlightAreNotAsked(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("rehearsal")
	b.step(p, "vm")
	b.step(p, "job", "vm")
	del := b.step(p, "delete", "job")
	del.Discards = []phases.Address{addr("job")}
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(h.dir, state.Options{Lock: state.NewLockInfo("test")})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := st.Step(addr("delete"))
	rec.Status = state.Running // killed while deleting
	st.Checkpoint(rec)
	st.Close()
	h.fake.ReadFn = func(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
		if req.Addr.Name == "job" {
			return providers.ReadResponse{Diagnostics: phases.Errorf("Cannot Reach Cluster", "dial tcp: connection refused")}
		}
		return providers.ReadResponse{Observation: providers.Absent}
	}
	if err := h.run(b.r); err != nil {
		t.Fatalf("the resumed run: %v", err)
	}
	if n := h.fake.Applied("fake_step.delete"); n != 2 {
		t.Errorf("the deletion was applied %d times, want twice (resumed)", n)
	}
	if h.fake.Applied("fake_step.job") != 1 {
		t.Errorf("the job was applied again")
	}
}

// TestPlanDoesNotAskWhatWentWithADiscardingStep: once the deletion of
// the throwaway VM is done, the plan does not read what went with it
// (its cluster is gone: asking fails), and says why; what is outside it
// is read as usual.
func TestPlanDoesNotAskWhatWentWithADiscardingStep(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("rehearsal")
	b.step(p, "vm")
	b.step(p, "job", "vm")
	del := b.step(p, "delete", "job")
	del.Discards = []phases.Address{addr("job")}
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var read []string
	h.fake.ReadFn = func(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
		mu.Lock()
		read = append(read, req.Addr.Name)
		mu.Unlock()
		if req.Addr.Name == "job" {
			return providers.ReadResponse{Diagnostics: phases.Errorf("Cannot Reach Kubernetes", "dial tcp: connection refused")}
		}
		return providers.ReadResponse{Observation: providers.Present}
	}
	e, _ := h.open(b.r)
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatalf("the plan asked what went with the deletion: %v", diags.Err())
	}
	for _, sp := range plan.Phases[0].Steps {
		if sp.Addr.Name == "job" && (sp.Action != providers.NoOp || !strings.Contains(views.Because(sp.ReasonCode, sp.Why), "went with fake_step.delete")) {
			t.Errorf("job: %s %q", sp.Action, views.Because(sp.ReasonCode, sp.Why))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(strings.Join(read, " "), "job") {
		t.Errorf("read: %v", read)
	}
}
