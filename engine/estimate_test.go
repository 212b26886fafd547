package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// estimateRunbook: phase rehearsal (a step, and a copy whose outputs say
// how fast it copied), phase move: stop, copy (planned bytes to copy),
// release after it, and an unrelated step; check serving. Service app
// opens its window at stop and closes it at serving.
func estimateRunbook(max time.Duration) *rb {
	b := newRB()
	r := b.phase("rehearsal")
	b.step(r, "measure")
	b.step(r, "sample_copy")
	m := b.phase("move")
	b.step(m, "prepare")
	b.step(m, "stop", "prepare")
	b.step(m, "copy", "stop")
	b.step(m, "release", "copy")
	b.step(m, "unrelated")
	b.check(m, "serving", phases.CheckAfter)
	b.r.Services = []*phases.Service{{Name: "app", Stop: []phases.Address{addr("stop")}, Serving: addr("serving"), MaxDowntime: max}}
	return b
}

// The plan expects a window as the longest path of steps from the stop
// to the serving check: a copy at the rate measured by the copies run
// here, the other steps at their provider's median here, the check
// assumed (no check has run); a step needed before the stop does not
// count, nor does one beside the stop that ends before it (unrelated).
// Over max_downtime, the plan fails saying what would shorten it.
func TestPlanExpectsServiceWindows(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := estimateRunbook(0)
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		switch req.Addr.Name {
		case "sample_copy":
			// 200 MB in 2s: 100 MB/s, as a copy's outputs say.
			return providers.ApplyResponse{Outputs: cty.ObjectVal(map[string]cty.Value{"copied_bytes": cty.NumberIntVal(200e6), "seconds": cty.NumberIntVal(2)})}
		case "measure":
			// 100 MB in 1s, as a Job's facts say (its termination message).
			return providers.ApplyResponse{Outputs: cty.EmptyObjectVal, Facts: map[string]string{"copied_bytes": "100000000", "seconds": "1"}}
		}
		return providers.ApplyResponse{Outputs: cty.EmptyObjectVal}
	}
	rehearse(h, b)
	plan := h.plan(b.r, "move")
	if len(plan.Services) != 1 {
		t.Fatalf("services = %+v", plan.Services)
	}
	sp := plan.Services[0]
	var got []string
	for _, term := range sp.Terms {
		got = append(got, term.Addr.Name+" "+term.Expected.String()+" "+term.Basis)
	}
	want := []string{
		"stop 4s measured: the median of 2 steps of type fake_step run here",
		"copy 7s copy: 300.0 MB at 100.0 MB/s, measured: 2 copies run here; and 4s as the median of 2 steps of type fake_step run here",
		"release 4s measured: the median of 2 steps of type fake_step run here",
		"serving 10s assumed: no check of its type or provider has run here yet",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("terms:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if sp.Expected != 25*time.Second {
		t.Errorf("expected %s, want 25s", sp.Expected)
	}

	b = estimateRunbook(20 * time.Second)
	e, st2 := h.open(b.r)
	_, diags := e.Plan(context.Background(), engine.PlanOptions{Phases: []string{"move"}})
	st2.Close()
	if !diags.HasErrors() || diags[0].Summary != "Expected Downtime Over the Limit" || !strings.Contains(diags[0].Detail, "over its max_downtime of 20s") || !strings.Contains(diags[0].Detail, "fake_step.serving takes most of it") {
		t.Errorf("a window over max_downtime: %v", diags.Err())
	}
}

// rehearse runs estimateRunbook's rehearsal, its steps recorded as
// taking 4s each; the move's copy plans 300 MB to copy.
func rehearse(h *harness, b *rb) {
	h.t.Helper()
	h.fake.PlanFn = func(ctx context.Context, req providers.PlanRequest) providers.PlanResponse {
		if req.Addr.Name == "copy" {
			return providers.PlanResponse{CopyBytes: 300e6}
		}
		return providers.PlanResponse{}
	}
	if err := h.run(b.r, "rehearsal"); err != nil {
		h.t.Fatal(err)
	}
	st, err := state.Open(h.dir, state.Options{Lock: state.NewLockInfo("test")})
	if err != nil {
		h.t.Fatal(err)
	}
	defer st.Close()
	for _, name := range []string{"measure", "sample_copy"} {
		rec, _ := st.Step(addr(name))
		start := rec.FinishedAt.Add(-4 * time.Second)
		rec.StartedAt = &start
		st.Checkpoint(rec)
	}
}

// plan plans the named phases (all when none) with a new engine.
func (h *harness) plan(r *phases.Runbook, names ...string) *engine.Plan {
	h.t.Helper()
	e, st := h.open(r)
	defer st.Close()
	p, diags := e.Plan(context.Background(), engine.PlanOptions{Phases: names})
	if diags.HasErrors() {
		h.t.Fatal(diags.Err())
	}
	return p
}

// A serving check that depends on the service's own steps runs once they
// are done (Phase.WaitsFor), so the window the plan expects ends there:
// a longer chain of another service's steps in the same phase does not
// count, as it does for a check that waits for the whole phase.
func TestPlanServingCheckWaitsForItsOwnSteps(t *testing.T) {
	t.Parallel()
	for _, own := range []bool{true, false} {
		h := newHarness(t)
		b := estimateRunbook(0)
		m := b.r.Phases[1]
		prev := "stop"
		for _, name := range []string{"other1", "other2", "other3", "other4", "other5"} {
			b.step(m, name, prev)
			prev = name
		}
		if own {
			m.Checks[0].DependsOn = []phases.Address{addr("release")}
		}
		rehearse(h, b)
		plan := h.plan(b.r, "move")
		var names []string
		for _, term := range plan.Services[0].Terms {
			names = append(names, term.Addr.Name)
		}
		// stop 4s, copy at the default rate (no copy measured its
		// bytes) and release 4s, or stop and the five others (4s each);
		// then the check (10s, assumed).
		want, wantNames := 4*time.Second+plan.Services[0].Terms[1].Expected+4*time.Second+10*time.Second, "stop copy release serving"
		if !own {
			want, wantNames = 6*4*time.Second+10*time.Second, "stop other1 other2 other3 other4 other5 serving"
		}
		if got := strings.Join(names, " "); got != wantNames || plan.Services[0].Expected != want {
			t.Errorf("own steps %v: expected %s over %s, want %s over %s", own, plan.Services[0].Expected, got, want, wantNames)
		}
		var waits []phases.Address
		for _, sp := range plan.Phases[0].Steps {
			if sp.Addr == addr("serving") {
				waits = sp.WaitsFor
			}
		}
		if own != (len(waits) == 1 && waits[0] == addr("release")) {
			t.Errorf("own steps %v: the plan says the check waits for %v", own, waits)
		}
	}
}
