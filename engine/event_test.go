package engine_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

// TestEventKindsOfRunAndRollback: a phase up to date, the phases of a
// rollback and a step that could not be undone are told apart by their
// kind alone, with no message to read.
func TestEventKindsOfRunAndRollback(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	a := b.phase("A")
	b.step(a, "a")
	p := b.phase("B")
	b.step(p, "b")
	kinds := func(from int) []string {
		h.mu.Lock()
		defer h.mu.Unlock()
		var out []string
		for _, ev := range h.events[from:] {
			if ev.Kind == engine.StepOutput {
				continue
			}
			if ev.Kind == engine.PhaseUpToDate || ev.Kind == engine.PhaseRollbackStarted || ev.Kind == engine.PhaseRolledBack || ev.Kind == engine.StepRevertFailed {
				if ev.Message != "" {
					t.Errorf("%s carries the message %q: its kind says it all", ev.Kind, ev.Message)
				}
			}
			s := string(ev.Kind) + " " + ev.Phase
			if !ev.Addr.IsZero() {
				s = string(ev.Kind) + " " + ev.Addr.Name
			}
			out = append(out, s)
		}
		return out
	}
	want := func(what string, got []string, want ...string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: events\n  %s\nwant\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	}
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	n := len(h.events)
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	want("a run again", kinds(n), "phase_up_to_date A", "phase_up_to_date B")

	h.fake.RevertFn = func(_ context.Context, req providers.RevertRequest) providers.RevertResponse {
		return providers.RevertResponse{Diagnostics: phases.Errorf("Revert Failed", "%s did not revert.", req.Addr)}
	}
	n = len(h.events)
	if _, err := h.rollback(b.r); err == nil {
		t.Fatal("a rollback whose revert fails succeeded")
	}
	want("a rollback that fails", kinds(n), "phase_rollback_started B", "step_reverting b", "step_revert_failed b", "phase_failed B")

	h.fake.RevertFn = nil
	n = len(h.events)
	if _, err := h.rollback(b.r); err != nil {
		t.Fatal(err)
	}
	want("the rollback again", kinds(n),
		"phase_rollback_started B", "step_reverting b", "step_reverted b", "phase_rolled_back B",
		"phase_rollback_started A", "step_reverting a", "step_reverted a", "phase_rolled_back A")
}
