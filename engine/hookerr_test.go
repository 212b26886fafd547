package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

var errHook = errors.New("the hook could not record it")

// failOn makes the harness's hook fail on every event of kind k.
func failOn(k engine.EventKind) func(engine.Event) error {
	return func(ev engine.Event) error {
		if ev.Kind == k {
			return errHook
		}
		return nil
	}
}

// A hook that fails on a step's output line stops the run with its error:
// no step starts after it.
func TestFailingHookOnStepOutputStopsRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("p")
	b.step(p, "talks")
	b.step(p, "after", "talks")
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		fmt.Fprintf(req.Log, "hello from %s\n", req.Addr)
		return providers.ApplyResponse{Outputs: cty.EmptyObjectVal}
	}
	h.hookErr = failOn(engine.StepOutput)
	if err := h.run(b.r); !errors.Is(err, errHook) {
		t.Fatalf("run: %v, want the hook's error", err)
	}
	if n := h.fake.Applied("fake_step.after"); n != 0 {
		t.Errorf("a step started after a hook failed (%d applies)", n)
	}
}

// A hook that fails on a skipped step stops the run with its error, not
// the phase's.
func TestFailingHookOnStepSkippedStopsRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("p")
	b.step(p, "broken")
	b.step(p, "waits", "broken")
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Broken", "no")}
	}
	h.hookErr = failOn(engine.StepSkipped)
	if err := h.run(b.r); !errors.Is(err, errHook) {
		t.Fatalf("run: %v, want the hook's error", err)
	}
}

// A hook that fails on a phase's failure stops the run with its error,
// and the next phase does not start.
func TestFailingHookOnPhaseFailedStopsRun(t *testing.T) {
	t.Parallel()
	for _, rollback := range []bool{false, true} {
		h := newHarness(t)
		b := newRB()
		b.step(b.phase("p"), "a")
		if rollback {
			if err := h.run(b.r); err != nil {
				t.Fatal(err)
			}
			h.fake.RevertFn = func(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
				return providers.RevertResponse{Diagnostics: phases.Errorf("Broken", "no")}
			}
		} else {
			h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
				return providers.ApplyResponse{Diagnostics: phases.Errorf("Broken", "no")}
			}
		}
		h.hookErr = failOn(engine.PhaseFailed)
		var err error
		if rollback {
			_, err = h.rollback(b.r)
		} else {
			err = h.run(b.r)
		}
		if !errors.Is(err, errHook) {
			t.Errorf("rollback %v: %v, want the hook's error", rollback, err)
		}
	}
}

// A revert's output reaches the hooks like an apply's: every line, the
// last one even without a newline, marked as the step's.
func TestRevertOutputReachesHooks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	b.step(b.phase("p"), "a")
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	h.fake.RevertFn = func(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
		fmt.Fprint(req.Log, "first line\nlast line, unterminated")
		return providers.RevertResponse{}
	}
	h.events = nil
	if _, err := h.rollback(b.r); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, ev := range h.events {
		if ev.Kind == engine.StepOutput && ev.Addr == addr("a") {
			lines = append(lines, ev.Message)
		}
	}
	if fmt.Sprint(lines) != "[first line last line, unterminated]" {
		t.Errorf("revert output lines: %q", lines)
	}
}

// A failing hook on a revert's output stops the rollback with its error.
func TestFailingHookOnRevertOutputStopsRollback(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("p")
	b.step(p, "first")
	b.step(p, "second", "first")
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	h.fake.RevertFn = func(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
		fmt.Fprintln(req.Log, "undoing")
		return providers.RevertResponse{}
	}
	h.hookErr = failOn(engine.StepOutput)
	if _, err := h.rollback(b.r); !errors.Is(err, errHook) {
		t.Fatalf("rollback: %v, want the hook's error", err)
	}
	if n := h.fake.Reverted("fake_step.first"); n != 0 {
		t.Errorf("a step was undone after a hook failed (%d reverts)", n)
	}
}
