package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// waitType is a step type that only waits (a readiness poll), added to
// the fake's schema by waitingHarness.
const waitType = "fake_wait"

func waitingHarness(t *testing.T) *harness {
	h := newHarness(t)
	h.fake.SchemaResp.StepTypes[waitType] = phases.StepType{Description: "Waits.", WaitsOnly: true, CanCheck: true}
	return h
}

// waitStep adds a step of waitType named name.
func (b *rb) waitStep(p *phases.Phase, name string, deps ...string) *phases.Step {
	s := mkStep(p, name, value(name), deps...)
	s.Addr.Type = waitType
	p.Steps = append(p.Steps, s)
	return s
}

// record reads a's record from the state the harness left.
func (h *harness) record(a phases.Address) *state.StepRecord {
	h.t.Helper()
	st, err := state.Open(h.dir, state.Options{})
	if err != nil {
		h.t.Fatal(err)
	}
	defer st.Close()
	rec, ok := st.Step(a)
	if !ok {
		return &state.StepRecord{Addr: a, Status: state.Pending}
	}
	return rec
}

func (h *harness) kinds(a phases.Address) []engine.EventKind {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []engine.EventKind
	for _, ev := range h.events {
		if ev.Addr == a {
			out = append(out, ev.Kind)
		}
	}
	return out
}

// waitTen is an Apply that waits ten minutes, or until its context ends.
func waitTen(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
	select {
	case <-time.After(10 * time.Minute):
		return providers.ApplyResponse{Outputs: cty.EmptyObjectVal}
	case <-ctx.Done():
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Step Interrupted", "%s: %v.", req.Addr, context.Cause(ctx))}
	}
}

// TestStopEndsAWaitAtOnce: a step that only waits, ten minutes, ends
// within a moment of the first stop and is recorded as not done (pending,
// not failed), while the step with an effect beside it finishes and is
// done; the step after the wait stays pending (not skipped), the run
// ends interrupted, and the next run does the wait again, not the effect.
func TestStopEndsAWaitAtOnce(t *testing.T) {
	t.Parallel()
	h := waitingHarness(t)
	b := newRB()
	p := b.phase("p")
	b.step(p, "effect")
	wait := b.waitStep(p, "ready")
	b.step(p, "after").DependsOn = []phases.Address{wait.Addr}
	b.step(p, "later", "effect") // ready once the effect is done: after the stop
	var wg sync.WaitGroup
	wg.Add(2)
	stop, stopNow := context.WithCancel(context.Background())
	var stopped, waitEnded time.Time
	var finishedEffect bool
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		switch req.Addr.Name {
		case "ready":
			wg.Done()
			defer func() { waitEnded = time.Now() }()
			return waitTen(ctx, req)
		case "effect":
			wg.Done()
			<-stop.Done()
			time.Sleep(300 * time.Millisecond) // an effect takes its time to finish
			if ctx.Err() != nil {
				return providers.ApplyResponse{Diagnostics: phases.Errorf("Step Interrupted", "cancelled")}
			}
			finishedEffect = true
			return providers.ApplyResponse{Outputs: cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal("made")}), Revert: &providers.RevertData{Description: "undo"}}
		}
		return providers.ApplyResponse{Outputs: cty.EmptyObjectVal}
	}
	go func() {
		wg.Wait()
		stopped = time.Now()
		stopNow()
	}()
	e, st := h.open(b.r)
	plan, _ := e.Plan(context.Background(), engine.PlanOptions{})
	err := e.Run(stop, context.Background(), plan, engine.RunOptions{})
	took := time.Since(stopped)
	st.Close()
	if !errors.Is(err, engine.ErrInterrupted) {
		t.Fatalf("the run ended with %v, want ErrInterrupted", err)
	}
	if took > 2*time.Second {
		t.Errorf("the run ended %s after the stop, want within the effect's 300ms and a moment", took)
	}
	if w := waitEnded.Sub(stopped); w > time.Second {
		t.Errorf("the wait ended %s after the stop, want at once", w)
	}
	t.Logf("the ten-minute wait ended %s after the stop, the run %s after it (the effect beside it took 300ms to finish)",
		waitEnded.Sub(stopped).Round(time.Microsecond), took.Round(time.Millisecond))
	ready := h.record(phases.Address{Type: waitType, Name: "ready"})
	if ready.Status != state.Pending || !strings.Contains(ready.LastError, "Step Interrupted") || ready.FinishedAt == nil {
		t.Errorf("the wait is recorded %s (%q), want pending, saying it was stopped", ready.Status, ready.LastError)
	}
	if !finishedEffect || h.status("effect") != state.Done {
		t.Errorf("the effect step is %s (finished %v), want done", h.status("effect"), finishedEffect)
	}
	if h.status("after") != state.Pending || h.status("later") != state.Pending {
		t.Errorf("after=%s later=%s, want both pending", h.status("after"), h.status("later"))
	}
	kinds := h.kinds(phases.Address{Type: waitType, Name: "ready"})
	if len(kinds) != 2 || kinds[1] != engine.StepStopped {
		t.Errorf("the wait's events are %v, want started then stopped", kinds)
	}
	for _, ev := range h.events {
		if ev.Kind == engine.StepFailed || ev.Kind == engine.StepSkipped || ev.Kind == engine.PhaseFailed {
			t.Errorf("a stop is no failure, but the run said %s %s: %s", ev.Kind, ev.Addr, ev.Error)
		}
	}

	// The next run waits again, and does nothing twice.
	h.fake.ApplyFn = nil
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"fake_step.effect", "fake_wait.ready", "fake_step.after", "fake_step.later"} {
		want := 1
		if a == "fake_wait.ready" {
			want = 2
		}
		if got := h.fake.Applied(a); got != want {
			t.Errorf("%s applied %d times, want %d", a, got, want)
		}
	}
	if rec := h.record(phases.Address{Type: waitType, Name: "ready"}); rec.Status != state.Done || rec.LastError != "" {
		t.Errorf("after the resumed run the wait is %s (%q)", rec.Status, rec.LastError)
	}
}

// TestStopEndsTheWaitAfterAnEffect: an Apply that made its effect and
// waits learns of the stop from its request's Stop and answers Stopped:
// not done, its revert data kept (a rollback undoes it), and the next run
// applies it again with that revert data as its prior.
func TestStopEndsTheWaitAfterAnEffect(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	b.step(b.phase("p"), "instance")
	stop, stopNow := context.WithCancel(context.Background())
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		// Created and started; now the address.
		stopNow()
		select {
		case <-req.Stop:
			return providers.ApplyResponse{Stopped: true, Revert: &providers.RevertData{Description: "delete the instance"},
				Diagnostics: phases.Errorf("Stopped While Waiting", "instance created and started, its address not waited for")}
		case <-ctx.Done():
			return providers.ApplyResponse{Diagnostics: phases.Errorf("Step Interrupted", "cancelled")}
		case <-time.After(10 * time.Minute):
			return providers.ApplyResponse{Outputs: cty.EmptyObjectVal}
		}
	}
	e, st := h.open(b.r)
	plan, _ := e.Plan(context.Background(), engine.PlanOptions{})
	start := time.Now()
	err := e.Run(stop, context.Background(), plan, engine.RunOptions{})
	st.Close()
	if !errors.Is(err, engine.ErrInterrupted) || time.Since(start) > 2*time.Second {
		t.Fatalf("the run ended with %v after %s, want ErrInterrupted at once", err, time.Since(start))
	}
	rec := h.record(addr("instance"))
	if rec.Status != state.Pending || rec.Revert == nil || rec.Revert.Description != "delete the instance" || !strings.Contains(rec.LastError, "not waited for") {
		t.Fatalf("the record is %s, revert data %+v, %q; want pending with the revert data and why", rec.Status, rec.Revert, rec.LastError)
	}
	rp, err := func() (*engine.RollbackPlan, error) {
		e, st := h.open(b.r)
		defer st.Close()
		return e.PlanRollback(nil)
	}()
	if err != nil || !rp.HasChanges() {
		t.Errorf("the rollback plan does not undo the stopped step's effect (%v)", err)
	}

	var prior *providers.Prior
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		prior = req.Prior
		return providers.ApplyResponse{Outputs: cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal("addr")}), Revert: &providers.RevertData{Description: "delete the instance"}}
	}
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	if prior == nil || prior.Revert == nil || prior.Revert.Description != "delete the instance" {
		t.Errorf("the resumed apply got prior %+v, want the stopped one's revert data", prior)
	}
	if h.status("instance") != state.Done {
		t.Errorf("after the resumed run: %s", h.status("instance"))
	}
}

// TestStopBetweenAttempts: a step waiting to try again does not, once
// stopped: not done, the run interrupted at once.
func TestStopBetweenAttempts(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	s := b.step(b.phase("p"), "flaky")
	s.Retry = phases.RetryPolicy{Attempts: 3, Backoff: 10 * time.Minute}
	stop, stopNow := context.WithCancel(context.Background())
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		time.AfterFunc(50*time.Millisecond, stopNow)
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Not Yet", "try again")}
	}
	e, st := h.open(b.r)
	plan, _ := e.Plan(context.Background(), engine.PlanOptions{})
	start := time.Now()
	err := e.Run(stop, context.Background(), plan, engine.RunOptions{})
	st.Close()
	if !errors.Is(err, engine.ErrInterrupted) || time.Since(start) > 2*time.Second {
		t.Fatalf("the run ended with %v after %s, want ErrInterrupted at once", err, time.Since(start))
	}
	rec := h.record(addr("flaky"))
	if rec.Status != state.Pending || !strings.Contains(rec.LastError, "stopped before attempt 2") || !strings.Contains(rec.LastError, "try again") || h.fake.Applied("fake_step.flaky") != 1 {
		t.Errorf("flaky is %s (%q) after %d attempts", rec.Status, rec.LastError, h.fake.Applied("fake_step.flaky"))
	}
}

// TestStopEndsACheck: a check only reads, whatever its type: one waiting
// when the stop comes ends, not done, and the phase is interrupted, not
// failed.
func TestStopEndsACheck(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("p")
	b.step(p, "s")
	b.check(p, "healthy", phases.CheckAfter)
	stop, stopNow := context.WithCancel(context.Background())
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		if req.Addr.Name == "healthy" {
			time.AfterFunc(50*time.Millisecond, stopNow)
			return waitTen(ctx, req)
		}
		return providers.ApplyResponse{Outputs: cty.EmptyObjectVal}
	}
	e, st := h.open(b.r)
	plan, _ := e.Plan(context.Background(), engine.PlanOptions{})
	start := time.Now()
	err := e.Run(stop, context.Background(), plan, engine.RunOptions{})
	st.Close()
	var pe *engine.PhaseError
	if !errors.Is(err, engine.ErrInterrupted) || errors.As(err, &pe) || time.Since(start) > 2*time.Second {
		t.Fatalf("the run ended with %v after %s, want ErrInterrupted at once", err, time.Since(start))
	}
	if got := h.status("healthy"); got != state.Pending {
		t.Errorf("the check is %s, want pending", got)
	}
	if kinds := h.kinds(phases.Address{}); len(kinds) == 0 || kinds[len(kinds)-1] != engine.Interrupted {
		t.Errorf("the phase's events are %v, want it to end interrupted", kinds)
	}
}

// TestStopEndsTheWaitOfAStepFoundInFlight: a run killed while x was being
// applied left it running; the next run reads it InFlight, and its
// provider waits for what the killed run started (a node rebooting into
// its install). A first Ctrl-C ends that wait at once, applies nothing,
// and leaves x running, so that the run after reads it again.
func TestStopEndsTheWaitOfAStepFoundInFlight(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	b.step(b.phase("p"), "x")
	st, err := state.Open(h.dir, state.Options{Lock: state.NewLockInfo("test")})
	if err != nil {
		t.Fatal(err)
	}
	st.Checkpoint(&state.StepRecord{Addr: addr("x"), Phase: "p", Status: state.Running, Attempts: 1})
	st.Close()
	waiting := make(chan struct{})
	h.fake.ReadFn = func(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
		if !req.InFlight {
			t.Error("x was read without InFlight")
		}
		close(waiting)
		select {
		case <-ctx.Done():
			return providers.ReadResponse{Observation: providers.Unknown}
		case <-time.After(10 * time.Minute):
			return providers.ReadResponse{Observation: providers.Present}
		}
	}
	e, st2 := h.open(b.r)
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	stop, stopNow := context.WithCancel(context.Background())
	go func() { <-waiting; stopNow() }()
	start := time.Now()
	if err := e.Run(stop, context.Background(), plan, engine.RunOptions{}); !errors.Is(err, engine.ErrInterrupted) {
		t.Fatalf("the run: %v", err)
	}
	st2.Close()
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the stop took %s", d)
	}
	if n := h.fake.Applied("fake_step.x"); n != 0 {
		t.Errorf("x was applied %d times after the stop", n)
	}
	if s := h.status("x"); s != state.Running {
		t.Errorf("x is %s after the stop, want still running (read again next time)", s)
	}
}
