package engine_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// serviceRunbook: phase p stops the old instance (stop), releases the new
// one (release) and checks it serves (serving): service "app".
func serviceRunbook() *rb {
	b := newRB()
	p := b.phase("p")
	b.step(p, "stop")
	b.step(p, "release", "stop")
	b.check(p, "serving", phases.CheckAfter)
	b.r.Services = []*phases.Service{{Name: "app", Stop: []phases.Address{addr("stop")}, Serving: addr("serving")}}
	return b
}

// fact is the time a record's fact holds (zero when none).
func (h *harness) fact(name, fact string) time.Time {
	h.t.Helper()
	st, err := state.Open(h.dir, state.Options{})
	if err != nil {
		h.t.Fatal(err)
	}
	defer st.Close()
	rec, ok := st.Step(addr(name))
	if !ok || rec.Facts[fact] == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, rec.Facts[fact])
	if err != nil {
		h.t.Fatalf("%s's %s = %q: %v", name, fact, rec.Facts[fact], err)
	}
	return t
}

// A service's window runs from its stop's first start to its serving
// check's first pass, across runs: a cutover that fails (or is killed)
// after the stop and is resumed later measures the whole window; a run
// that finds it serving again keeps the first pass; a rollback and a new
// run open a new window.
func TestServiceWindowSpansResumedCutover(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := serviceRunbook()
	failing := true
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		if req.Addr.Name == "serving" && failing {
			return providers.ApplyResponse{Diagnostics: phases.Errorf("Not Serving", "no answer yet")}
		}
		return providers.ApplyResponse{Outputs: cty.EmptyObjectVal, Revert: &providers.RevertData{Description: "undo"}}
	}
	before := time.Now()
	if err := h.run(b.r); err == nil {
		t.Fatal("the failing check did not fail the run")
	}
	down := h.fact("stop", phases.FactDownSince)
	if down.Before(before) || !h.fact("serving", phases.FactServingSince).IsZero() {
		t.Fatalf("after the failed cutover: down since %v (run began %v), serving since %v", down, before, h.fact("serving", phases.FactServingSince))
	}

	resumed := time.Now()
	failing = false
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	serving := h.fact("serving", phases.FactServingSince)
	if got := h.fact("stop", phases.FactDownSince); !got.Equal(down) {
		t.Errorf("the resumed run moved the window's start from %v to %v", down, got)
	}
	if serving.Before(resumed) {
		t.Errorf("serving since %v, before the run that passed began (%v)", serving, resumed)
	}

	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	if got := h.fact("serving", phases.FactServingSince); !got.Equal(serving) {
		t.Errorf("a run that found it serving again moved the first pass from %v to %v", serving, got)
	}

	if _, err := h.rollback(b.r); err != nil {
		t.Fatal(err)
	}
	again := time.Now()
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	if d, s := h.fact("stop", phases.FactDownSince), h.fact("serving", phases.FactServingSince); d.Before(again) || s.Before(d) {
		t.Errorf("after a rollback and a new run: down since %v, serving since %v; want a new window after %v", d, s, again)
	}
}

// A stop step a killed run left running keeps the start of the attempt
// that was cut off (or, in a record from before the fact, its StartedAt):
// the old instance has been going down since then. A stop tried again
// after a failed attempt keeps its first attempt's start.
func TestServiceWindowStartSurvivesKillAndRetry(t *testing.T) {
	t.Parallel()
	cut := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	for _, tc := range []struct {
		name  string
		facts map[string]string
	}{
		{"with its fact", map[string]string{phases.FactDownSince: cut.Format(time.RFC3339Nano)}},
		{"from before the fact", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			b := serviceRunbook()
			st, err := state.Open(h.dir, state.Options{Lock: state.NewLockInfo("test")})
			if err != nil {
				t.Fatal(err)
			}
			st.Checkpoint(&state.StepRecord{Addr: addr("stop"), Phase: "p", Status: state.Running, Attempts: 1, StartedAt: &cut, Facts: tc.facts})
			st.Close()
			h.fake.ReadFn = func(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
				return providers.ReadResponse{Observation: providers.Unknown}
			}
			if err := h.run(b.r); err != nil {
				t.Fatal(err)
			}
			if got := h.fact("stop", phases.FactDownSince); !got.Equal(cut) {
				t.Errorf("down since %v, want the cut-off attempt's start %v", got, cut)
			}
		})
	}

	t.Run("retried", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		b := serviceRunbook()
		b.r.Phases[0].Steps[0].Retry = phases.RetryPolicy{Attempts: 2, Backoff: 20 * time.Millisecond}
		tries := 0
		var first time.Time
		h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
			if req.Addr.Name == "stop" {
				if tries++; tries == 1 {
					first = time.Now()
					return providers.ApplyResponse{Diagnostics: phases.Errorf("Busy", "try again")}
				}
			}
			return providers.ApplyResponse{Outputs: cty.EmptyObjectVal}
		}
		if err := h.run(b.r); err != nil {
			t.Fatal(err)
		}
		if got := h.fact("stop", phases.FactDownSince); tries != 2 || got.IsZero() || got.After(first) {
			t.Errorf("after %d tries, down since %v; want the first try's start, before %v", tries, got, first)
		}
	})
}

// An after check that depends on steps of its phase runs as soon as they
// are done, beside the phase's other steps: a service's serving check
// answers when its own release is up, not when the slowest step of the
// phase ends. Its failure fails the phase as a check's does, once the
// other steps and checks ended, and the next run runs it alone again.
func TestAfterCheckRunsOnceItsStepsAreDone(t *testing.T) {
	t.Parallel()
	runbook := func() *rb {
		b := newRB()
		p := b.phase("p")
		b.step(p, "release")
		b.step(p, "other")
		c := b.check(p, "serving", phases.CheckAfter)
		c.DependsOn = []phases.Address{addr("release")}
		b.check(p, "last", phases.CheckAfter)
		return b
	}
	ok := providers.ApplyResponse{Outputs: cty.EmptyObjectVal, Revert: &providers.RevertData{Description: "undo"}}

	t.Run("early", func(t *testing.T) {
		h := newHarness(t)
		served := make(chan struct{})
		h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
			switch req.Addr.Name {
			case "serving":
				close(served)
			case "other": // ends only once the check ran
				select {
				case <-served:
				case <-time.After(60 * time.Second):
					return providers.ApplyResponse{Diagnostics: phases.Errorf("Check Not Run", "the serving check did not run while this step ran")}
				}
			}
			return ok
		}
		if err := h.run(runbook().r); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("failing", func(t *testing.T) {
		h := newHarness(t)
		var mu sync.Mutex
		failing := true
		h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
			mu.Lock()
			defer mu.Unlock()
			if req.Addr.Name == "serving" && failing {
				return providers.ApplyResponse{Diagnostics: phases.Errorf("Not Serving", "no answer yet")}
			}
			return ok
		}
		b := runbook()
		err := h.run(b.r)
		var pe *engine.PhaseError
		if !errors.As(err, &pe) || !slices.Equal(pe.Checks, []phases.Address{addr("serving")}) || len(pe.Failed) != 0 {
			t.Fatalf("the failing early check: %v", err)
		}
		mu.Lock()
		failing = false
		mu.Unlock()
		if err := h.run(b.r); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]int{"release": 1, "other": 1, "serving": 2, "last": 1} {
			if n := h.fake.ApplyCount[addr(name).String()]; n != want {
				t.Errorf("%s applied %d times, want %d", name, n, want)
			}
		}
	})
}
