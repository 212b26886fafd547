package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/fake"
	"github.com/homelab-migrate/migrate/state"
)

// elsewhereState is a state that says every step recorded running or
// reverting by another holder may still be at it there.
type elsewhereState struct{ *state.Local }

func (elsewhereState) RunningElsewhere(_ context.Context, rec *state.StepRecord) error {
	return errors.New(rec.Addr.String() + " may still be running elsewhere")
}

// A step recorded running (or reverting) that its state says may still
// run under another holder is neither read, applied nor reverted: the run
// and the rollback refuse it, its record as that holder left it.
func TestRunningElsewhereIsRefused(t *testing.T) {
	t.Parallel()
	for _, status := range []state.Status{state.Running, state.Reverting} {
		t.Run(string(status), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			b := newRB()
			p := b.phase("p")
			b.step(p, "x")
			st, err := state.Open(h.dir, state.Options{Lock: state.NewLockInfo("test")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			st.Checkpoint(&state.StepRecord{Addr: addr("x"), Phase: "p", Status: status, Attempts: 1,
				Revert: &phases.RevertData{Description: "undo x"}})
			e, diags := engine.New(context.Background(), engine.Options{
				Runbook:   b.r,
				Factories: map[string]providers.Factory{"fake": fake.Factory(h.fake)},
				State:     elsewhereState{st},
				Hooks:     []engine.Hook{&engine.StateHook{State: st}},
			})
			if diags.HasErrors() {
				t.Fatal(diags.Err())
			}
			plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
			if diags.HasErrors() {
				t.Fatal(diags.Err())
			}
			err = e.Run(context.Background(), context.Background(), plan, engine.RunOptions{})
			var pe *engine.PhaseError
			if !errors.As(err, &pe) || len(pe.Failed) != 1 || pe.Failed[0] != addr("x") {
				t.Fatalf("run: %v, want x failed", err)
			}
			rp, err := e.PlanRollback(nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Rollback(context.Background(), context.Background(), rp); err == nil || !strings.Contains(err.Error(), "fake_step.x") {
				t.Fatalf("rollback: %v, want x refused", err)
			}
			if h.fake.ReadCalled || h.fake.Applied("fake_step.x") != 0 || h.fake.Reverted("fake_step.x") != 0 {
				t.Errorf("x was read (%v), applied (%d) or reverted (%d)", h.fake.ReadCalled, h.fake.Applied("fake_step.x"), h.fake.Reverted("fake_step.x"))
			}
			if rec, _ := st.Step(addr("x")); rec.Status != status || rec.Attempts != 1 {
				t.Errorf("the record changed: %+v", rec)
			}
		})
	}
}
