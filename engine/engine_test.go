package engine_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/fake"
	"github.com/homelab-migrate/migrate/state"
)

// rb builds runbooks in code: phases of fake_step steps.
type rb struct{ r *phases.Runbook }

func newRB() *rb {
	return &rb{r: &phases.Runbook{Dir: ".", Providers: []*phases.ProviderConfig{{Type: "fake", Name: "default"}}}}
}

func (b *rb) phase(name string, after ...string) *phases.Phase {
	if len(after) == 0 && len(b.r.Phases) > 0 {
		after = []string{b.r.Phases[len(b.r.Phases)-1].Name}
	}
	p := &phases.Phase{Name: name, After: after}
	b.r.Phases = append(b.r.Phases, p)
	return p
}

func addr(name string) phases.Address { return phases.Address{Type: fake.StepType, Name: name} }

func mkStep(p *phases.Phase, name string, cfg phases.Evaluator, deps ...string) *phases.Step {
	s := &phases.Step{Addr: addr(name), Phase: p.Name, Provider: "fake.default", Config: cfg}
	for _, d := range deps {
		s.DependsOn = append(s.DependsOn, addr(d))
	}
	return s
}

func value(v string) phases.Evaluator {
	return phases.Static(cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal(v)}))
}

func (b *rb) step(p *phases.Phase, name string, deps ...string) *phases.Step {
	s := mkStep(p, name, value(name), deps...)
	p.Steps = append(p.Steps, s)
	return s
}

func (b *rb) check(p *phases.Phase, name string, when phases.CheckWhen) *phases.Step {
	s := mkStep(p, name, value(name))
	s.When = when
	p.Checks = append(p.Checks, s)
	return s
}

type harness struct {
	t      *testing.T
	dir    string
	fake   *fake.Provider
	events []engine.Event
	mu     sync.Mutex
	log    *state.Log // given to the engine when set
	// hookErr, when set, is what the test hook returns for an event
	// (after recording it): a view or the state failing.
	hookErr func(engine.Event) error
}

func newHarness(t *testing.T) *harness {
	return &harness{t: t, dir: t.TempDir(), fake: fake.New()}
}

// open makes an engine over a freshly opened, locked state; the state is
// closed when the test ends or when close is called.
func (h *harness) open(r *phases.Runbook) (*engine.Engine, *state.Local) {
	h.t.Helper()
	st, err := state.Open(h.dir, state.Options{Lock: state.NewLockInfo("test"), MigrateVersion: "test"})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { st.Close() })
	e, diags := engine.New(context.Background(), engine.Options{
		Runbook:     r,
		Factories:   map[string]providers.Factory{"fake": fake.Factory(h.fake)},
		State:       st,
		Parallelism: 4,
		Log:         h.log,
		Hooks: []engine.Hook{engine.HookFunc(func(ev engine.Event) error {
			h.mu.Lock()
			h.events = append(h.events, ev)
			h.mu.Unlock()
			if h.hookErr != nil {
				return h.hookErr(ev)
			}
			return nil
		})},
	})
	if diags.HasErrors() {
		h.t.Fatal(diags.Err())
	}
	return e, st
}

// run plans and runs the named phases (all when none) with a new engine and
// state, like one `migrate run` process.
func (h *harness) run(r *phases.Runbook, names ...string) error {
	h.t.Helper()
	e, st := h.open(r)
	defer st.Close()
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{Phases: names})
	if diags.HasErrors() {
		return diags.Err()
	}
	return e.Run(context.Background(), context.Background(), plan, engine.RunOptions{})
}

func (h *harness) rollback(r *phases.Runbook, names ...string) (*engine.RollbackPlan, error) {
	h.t.Helper()
	e, st := h.open(r)
	defer st.Close()
	rp, err := e.PlanRollback(names)
	if err != nil {
		return nil, err
	}
	return rp, e.Rollback(context.Background(), context.Background(), rp)
}

func (h *harness) status(name string) state.Status {
	h.t.Helper()
	st, err := state.Open(h.dir, state.Options{})
	if err != nil {
		h.t.Fatal(err)
	}
	defer st.Close()
	rec, ok := st.Step(addr(name))
	if !ok {
		return state.Pending
	}
	return rec.Status
}

func TestRunAppliesInDependencyOrderAndPassesOutputs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("platform")
	b.step(p, "c", "b")
	b.step(p, "a")
	s := mkStep(p, "b", phases.EvaluatorFunc(func(out map[phases.Address]cty.Value) (cty.Value, phases.Diagnostics) {
		// b's value is a's output: a reference between steps.
		a := out[addr("a")]
		if !a.IsKnown() {
			return cty.ObjectVal(map[string]cty.Value{"value": cty.UnknownVal(cty.String)}), nil
		}
		return cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal("from-" + a.GetAttr("value").AsString())}), nil
	}), "a")
	p.Steps = append(p.Steps, s)

	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(h.fake.Order(), " "); got != "fake_step.a fake_step.b fake_step.c" {
		t.Errorf("apply order = %s", got)
	}
	for _, n := range []string{"a", "b", "c"} {
		if s := h.status(n); s != state.Done {
			t.Errorf("%s status = %s, want done", n, s)
		}
	}
	st, _ := state.Open(h.dir, state.Options{})
	defer st.Close()
	rec, _ := st.Step(addr("b"))
	if !strings.Contains(string(rec.Outputs), "from-a") {
		t.Errorf("b did not get a's output: %s", rec.Outputs)
	}
}

func TestFailedStepSkipsDependentsOthersFinish(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("apps")
	b.step(p, "bad")
	b.step(p, "after-bad", "bad")
	b.step(p, "independent")
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		if req.Addr.Name == "bad" {
			return providers.ApplyResponse{Diagnostics: phases.Errorf("Boom", "it broke")}
		}
		return providers.ApplyResponse{Outputs: cty.EmptyObjectVal}
	}
	err := h.run(b.r)
	var pe *engine.PhaseError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want PhaseError", err)
	}
	if len(pe.Failed) != 1 || pe.Failed[0] != addr("bad") || len(pe.Skipped) != 1 || pe.Skipped[0] != addr("after-bad") {
		t.Errorf("PhaseError = %+v", pe)
	}
	if h.status("independent") != state.Done || h.status("bad") != state.Failed || h.status("after-bad") != state.Pending {
		t.Errorf("statuses: independent=%s bad=%s after-bad=%s", h.status("independent"), h.status("bad"), h.status("after-bad"))
	}

	// Fixed: the next run does only what is left.
	h.fake.ApplyFn = nil
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	if n := h.fake.Applied("fake_step.independent"); n != 1 {
		t.Errorf("independent applied %d times, want 1 (done steps never run again)", n)
	}
	if h.status("after-bad") != state.Done {
		t.Errorf("after-bad = %s", h.status("after-bad"))
	}
}

func TestInterruptedStepIsObservedBeforeRedo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		obs       providers.Observation
		wantApply int
	}{{providers.Present, 0}, {providers.Absent, 1}, {providers.Unknown, 1}} {
		t.Run(tc.obs.String(), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			b := newRB()
			p := b.phase("p")
			b.step(p, "x")
			// A run that died while x was running left this behind.
			st, err := state.Open(h.dir, state.Options{Lock: state.NewLockInfo("test")})
			if err != nil {
				t.Fatal(err)
			}
			st.Checkpoint(&state.StepRecord{Addr: addr("x"), Phase: "p", Status: state.Running, Attempts: 1})
			st.Close()
			h.fake.ReadFn = func(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
				return providers.ReadResponse{Observation: tc.obs, Revert: &providers.RevertData{Description: "undo x"}}
			}
			if err := h.run(b.r); err != nil {
				t.Fatal(err)
			}
			if n := h.fake.Applied("fake_step.x"); n != tc.wantApply {
				t.Errorf("applied %d times, want %d", n, tc.wantApply)
			}
			if h.status("x") != state.Done {
				t.Errorf("status %s", h.status("x"))
			}
		})
	}
}

func TestPhaseNeedsEarlierPhasesComplete(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	b.step(b.phase("platform"), "a")
	b.step(b.phase("data-apps"), "b")
	err := h.run(b.r, "data-apps")
	if err == nil || !strings.Contains(err.Error(), "platform") {
		t.Fatalf("err = %v, want it to name phase platform", err)
	}
	if h.fake.Applied("fake_step.b") != 0 {
		t.Error("b ran although platform was not complete")
	}
	if err := h.run(b.r, "platform"); err != nil {
		t.Fatal(err)
	}
	if err := h.run(b.r, "data-apps"); err != nil {
		t.Fatal(err)
	}
}

func TestPlanActions(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("p")
	b.step(p, "same")
	changed := b.step(p, "changed")
	b.step(p, "drifted")
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	b.step(p, "new")
	changed.Config = value("changed-v2")
	h.fake.ReadFn = func(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
		if req.Addr.Name == "drifted" {
			return providers.ReadResponse{Observation: providers.Drifted, Detail: "value is now other"}
		}
		return providers.ReadResponse{Observation: providers.Present}
	}
	e, _ := h.open(b.r)
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	got := map[string]string{}
	for _, sp := range plan.Phases[0].Steps {
		got[sp.Addr.Name] = sp.Action.String()
	}
	want := map[string]string{"same": "no-op", "changed": "update", "drifted": "drift", "new": "create"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: action %s, want %s", k, got[k], v)
		}
	}
	if !plan.HasChanges() {
		t.Error("HasChanges = false")
	}
}

func TestStalePlanRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	b.step(b.phase("p"), "a")
	e, st := h.open(b.r)
	plan, _ := e.Plan(context.Background(), engine.PlanOptions{})
	st.Checkpoint(&state.StepRecord{Addr: addr("other"), Phase: "p", Status: state.Done})
	err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{})
	var stale *engine.StaleError
	if !errors.As(err, &stale) {
		t.Fatalf("err = %v, want StaleError", err)
	}
	if h.fake.Applied("fake_step.a") != 0 {
		t.Error("a stale plan was applied")
	}
}

func TestRetryWithBackoffAndTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("p")
	flaky := b.step(p, "flaky")
	flaky.Retry = phases.RetryPolicy{Attempts: 3, Backoff: 10 * time.Millisecond}
	slow := b.step(p, "slow")
	slow.Timeout = 50 * time.Millisecond
	var tries atomic.Int32
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		switch req.Addr.Name {
		case "flaky":
			if tries.Add(1) < 3 {
				return providers.ApplyResponse{Diagnostics: phases.Errorf("Not Yet", "try again")}
			}
		case "slow":
			<-ctx.Done()
			return providers.ApplyResponse{Diagnostics: phases.FromError("Interrupted", ctx.Err())}
		}
		return providers.ApplyResponse{Outputs: cty.EmptyObjectVal}
	}
	start := time.Now()
	err := h.run(b.r)
	if err == nil {
		t.Fatal("slow step did not fail")
	}
	if h.status("flaky") != state.Done || tries.Load() != 3 {
		t.Errorf("flaky: %s after %d tries", h.status("flaky"), tries.Load())
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("timeout not honoured: %s", time.Since(start))
	}
	st, _ := state.Open(h.dir, state.Options{})
	defer st.Close()
	rec, _ := st.Step(addr("slow"))
	if rec.Status != state.Failed || !strings.Contains(rec.LastError, "timeout") {
		t.Errorf("slow record = %s %q", rec.Status, rec.LastError)
	}
	if rec2, _ := st.Step(addr("flaky")); rec2.Attempts != 3 {
		t.Errorf("flaky attempts = %d", rec2.Attempts)
	}
}

func TestStopFinishesRunningStepsAndStartsNoMore(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("p")
	b.step(p, "first")
	b.step(p, "second", "first")
	stop, stopNow := context.WithCancel(context.Background())
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		stopNow() // Ctrl-C arrives while the first step runs
		time.Sleep(20 * time.Millisecond)
		return providers.ApplyResponse{Outputs: cty.EmptyObjectVal}
	}
	e, st := h.open(b.r)
	plan, _ := e.Plan(context.Background(), engine.PlanOptions{})
	err := e.Run(stop, context.Background(), plan, engine.RunOptions{})
	st.Close()
	if !errors.Is(err, engine.ErrInterrupted) {
		t.Fatalf("err = %v", err)
	}
	if h.status("first") != state.Done || h.status("second") != state.Pending {
		t.Errorf("first=%s second=%s", h.status("first"), h.status("second"))
	}
}

func TestParallelismIsBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("p")
	for i := 0; i < 12; i++ {
		b.step(p, string(rune('a'+i)))
	}
	var cur, peak atomic.Int32
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		n := cur.Add(1)
		for {
			old := peak.Load()
			if n <= old || peak.CompareAndSwap(old, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		cur.Add(-1)
		return providers.ApplyResponse{Outputs: cty.EmptyObjectVal}
	}
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	if peak.Load() != 4 {
		t.Errorf("peak concurrency = %d, want 4 (the harness's parallelism)", peak.Load())
	}
}

func TestChecksGatePhases(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("p")
	b.check(p, "gate", phases.CheckBefore)
	b.step(p, "work")
	b.check(p, "verify", phases.CheckAfter)
	failing := "gate"
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		if req.Addr.Name == failing {
			return providers.ApplyResponse{Diagnostics: phases.Errorf("Check Failed", "no")}
		}
		return providers.ApplyResponse{Outputs: cty.EmptyObjectVal}
	}
	if err := h.run(b.r); err == nil {
		t.Fatal("failing before-check did not stop the phase")
	}
	if h.fake.Applied("fake_step.work") != 0 {
		t.Error("a step ran although its phase's before-check failed")
	}
	failing = "verify"
	if err := h.run(b.r); err == nil {
		t.Fatal("failing after-check did not fail the phase")
	}
	b.step(b.phase("next"), "later")
	if err := h.run(b.r, "next"); err == nil || !strings.Contains(err.Error(), "not complete") {
		t.Fatalf("phase after an unverified phase: err = %v", err)
	}
	failing = ""
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
}

func TestRollbackRevertsInReverseOrderAndListsIrreversible(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p1 := b.phase("one")
	b.step(p1, "base")
	b.step(p1, "on-base", "base")
	b.step(p1, "forever")
	p2 := b.phase("two")
	b.step(p2, "top")
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		resp := providers.ApplyResponse{Outputs: cty.EmptyObjectVal, Revert: &providers.RevertData{Description: "undo " + req.Addr.Name}}
		if req.Addr.Name == "forever" {
			resp.Revert = nil
		}
		return resp
	}
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	if _, err := h.rollback(b.r, "one"); err == nil || !strings.Contains(err.Error(), "two") {
		t.Fatalf("rollback of one before two: err = %v", err)
	}
	var order []string
	var mu sync.Mutex
	h.fake.RevertFn = func(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
		mu.Lock()
		order = append(order, req.Addr.Name)
		mu.Unlock()
		return providers.RevertResponse{}
	}
	rp, err := h.rollback(b.r)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, " "); got != "top on-base base" {
		t.Errorf("revert order = %q", got)
	}
	if irr := rp.Irreversible(); len(irr) != 1 || irr[0] != addr("forever") {
		t.Errorf("irreversible = %v", irr)
	}
	if h.status("base") != state.Reverted || h.status("forever") != state.Done {
		t.Errorf("base=%s forever=%s", h.status("base"), h.status("forever"))
	}
	// A second rollback has nothing to do.
	rp, err = h.rollback(b.r)
	if err != nil || rp.HasChanges() {
		t.Errorf("second rollback: %v, changes=%v", err, rp.HasChanges())
	}
}

func TestRollbackResumesAfterInterruption(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("p")
	b.step(p, "a")
	b.step(p, "b")
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	// A rollback died while undoing a.
	st, _ := state.Open(h.dir, state.Options{Lock: state.NewLockInfo("test")})
	rec, _ := st.Step(addr("a"))
	rec.Status = state.Reverting
	st.Checkpoint(rec)
	st.Close()
	h.fake.ReadFn = func(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
		if req.Addr.Name == "a" {
			return providers.ReadResponse{Observation: providers.Absent}
		}
		return providers.ReadResponse{Observation: providers.Present}
	}
	// Its effect is gone, yet that says nothing of whether the revert
	// finished: it runs again, told that it is resumed.
	resumed := map[string]bool{}
	var mu sync.Mutex
	h.fake.RevertFn = func(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
		mu.Lock()
		resumed[req.Addr.Name] = req.Resumed
		mu.Unlock()
		return providers.RevertResponse{}
	}
	if _, err := h.rollback(b.r); err != nil {
		t.Fatal(err)
	}
	if h.fake.Reverted("fake_step.a") != 1 || h.fake.Reverted("fake_step.b") != 1 {
		t.Errorf("reverts: a=%d (interrupted, want it run again) b=%d", h.fake.Reverted("fake_step.a"), h.fake.Reverted("fake_step.b"))
	}
	if !resumed["a"] || resumed["b"] {
		t.Errorf("Resumed: a=%v (want true) b=%v (want false)", resumed["a"], resumed["b"])
	}
	if h.status("a") != state.Reverted || h.status("b") != state.Reverted {
		t.Errorf("a=%s b=%s", h.status("a"), h.status("b"))
	}
}

func TestSensitiveOutputsNeverReachState(t *testing.T) {
	t.Parallel()
	const canary = "CANARY-9f2c7e"
	h := newHarness(t)
	b := newRB()
	p := b.phase("p")
	b.step(p, "secret")
	consumer := mkStep(p, "consumer", phases.EvaluatorFunc(func(out map[phases.Address]cty.Value) (cty.Value, phases.Diagnostics) {
		return cty.ObjectVal(map[string]cty.Value{"value": out[addr("secret")].GetAttr("value")}), nil
	}), "secret")
	p.Steps = append(p.Steps, consumer)
	var seen atomic.Value
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		if req.Addr.Name == "consumer" {
			v, _ := req.Config.GetAttr("value").Unmark()
			seen.Store(v.AsString())
		}
		return providers.ApplyResponse{Outputs: cty.ObjectVal(map[string]cty.Value{
			"value": cty.StringVal(canary).Mark(phases.SensitiveMark),
		})}
	}
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	if seen.Load() != canary {
		t.Errorf("the consumer got %v, want the secret itself", seen.Load())
	}
	filepath.WalkDir(h.dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), canary) {
			t.Errorf("%s contains the secret in clear", path)
		}
		return nil
	})
}

func TestSecretsInsideOtherTextAreRedacted(t *testing.T) {
	t.Parallel()
	const canary = "CANARY-token-77ab"
	h := newHarness(t)
	b := newRB()
	b.r.Secrets = []string{canary}
	p := b.phase("p")
	b.step(p, "leaky")
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		// A command that echoes a secret interpolated into its argv.
		io.WriteString(req.Log, "logging in with "+canary+"\n")
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Login Failed", "token %s was refused", canary)}
	}
	if err := h.run(b.r); err == nil {
		t.Fatal("want failure")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	sawOutput := false
	for _, ev := range h.events {
		if strings.Contains(ev.Message+ev.Error, canary) {
			t.Errorf("event %s carries the secret: %+v", ev.Kind, ev)
		}
		if ev.Kind == engine.StepOutput && strings.Contains(ev.Message, phases.Redacted) {
			sawOutput = true
		}
	}
	if !sawOutput {
		t.Error("the output line was not reported (redacted)")
	}
	filepath.WalkDir(h.dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if b, _ := os.ReadFile(path); strings.Contains(string(b), canary) {
			t.Errorf("%s contains the secret in clear", path)
		}
		return nil
	})
}

// digesting is a fake whose steps also depend on something outside their
// attributes (like a Talos step's patch files).
type digesting struct {
	*fake.Provider
	digest  atomic.Value
	unknown atomic.Bool
}

func (d *digesting) InputDigest(context.Context, providers.DigestRequest) providers.DigestResponse {
	return providers.DigestResponse{Digest: d.digest.Load().(string), Unknown: d.unknown.Load()}
}

func TestInputDigestTurnsOutsideChangesIntoUpdates(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	d := &digesting{Provider: h.fake}
	d.digest.Store("patch-v1")
	b := newRB()
	b.step(b.phase("p"), "node")
	plan := func() providers.Action {
		st, err := state.Open(h.dir, state.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		e, diags := engine.New(context.Background(), engine.Options{Runbook: b.r, State: st,
			Factories: map[string]providers.Factory{"fake": func() providers.Interface { return d }}})
		if diags.HasErrors() {
			t.Fatal(diags.Err())
		}
		p, diags := e.Plan(context.Background(), engine.PlanOptions{})
		if diags.HasErrors() {
			t.Fatal(diags.Err())
		}
		return p.Phases[0].Steps[0].Action
	}
	{
		st, err := state.Open(h.dir, state.Options{Lock: state.NewLockInfo("test")})
		if err != nil {
			t.Fatal(err)
		}
		e, _ := engine.New(context.Background(), engine.Options{Runbook: b.r, State: st,
			Factories: map[string]providers.Factory{"fake": func() providers.Interface { return d }}})
		p, _ := e.Plan(context.Background(), engine.PlanOptions{})
		if err := e.Run(context.Background(), context.Background(), p, engine.RunOptions{}); err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
	if a := plan(); a != providers.NoOp {
		t.Errorf("same digest: %s, want no-op", a)
	}
	d.digest.Store("patch-v2")
	if a := plan(); a != providers.Update {
		t.Errorf("changed digest: %s, want update", a)
	}
	d.digest.Store("patch-v1")
	d.unknown.Store(true)
	if a := plan(); a != providers.Update {
		t.Errorf("unknown digest: %s, want update", a)
	}
}

func TestFailedApplyThatLeftSomethingIsRolledBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	b.step(b.phase("p"), "half")
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		// Created the instance, then could not start it.
		return providers.ApplyResponse{
			Revert:      &providers.RevertData{Description: "delete the instance it created"},
			Diagnostics: phases.Errorf("Start Failed", "the instance did not start"),
		}
	}
	if err := h.run(b.r); err == nil {
		t.Fatal("want failure")
	}
	rp, err := h.rollback(b.r)
	if err != nil {
		t.Fatal(err)
	}
	if !rp.HasChanges() || h.fake.Reverted("fake_step.half") != 1 {
		t.Errorf("the half-done step was not undone (plan changes %v, reverts %d)", rp.HasChanges(), h.fake.Reverted("fake_step.half"))
	}
}

// A rollback plan says, before anything is done, which steps to undo were
// changed outside migrate since they ran: undoing them discards that too.
func TestRollbackNotesChangesMadeOutside(t *testing.T) {
	h := newHarness(t)
	b := newRB()
	ph := b.phase("A")
	b.step(ph, "release")
	b.step(ph, "untouched")
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	h.fake.ReadFn = func(_ context.Context, req providers.ReadRequest) providers.ReadResponse {
		if req.Addr == addr("release") {
			return providers.ReadResponse{Observation: providers.Drifted, Detail: "at revision 4, migrate made revision 2"}
		}
		return providers.ReadResponse{Observation: providers.Present}
	}
	e, st := h.open(b.r)
	defer st.Close()
	rp, err := e.PlanRollback(nil)
	if err != nil {
		t.Fatal(err)
	}
	e.NoteChanges(context.Background(), rp)
	got := map[phases.Address]string{}
	for _, x := range rp.Phases[0].Revert {
		got[x.Addr] = x.Changed
	}
	if got[addr("release")] != "at revision 4, migrate made revision 2" || got[addr("untouched")] != "" {
		t.Errorf("notes: %v", got)
	}
}

// CheckOrder refuses a phase whose earlier phase is not complete before
// anything is planned: no provider is asked (a plan reads the old VMs,
// and a refused command must leave the world as it was); it lets the
// phase through once that one is complete, or run first by the same
// command.
func TestCheckOrderAsksNoProvider(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	b.step(b.phase("platform"), "a")
	b.step(b.phase("data-apps"), "b")
	e, st := h.open(b.r)
	err := e.CheckOrder([]string{"data-apps"})
	if err == nil || !strings.Contains(err.Error(), "phase data-apps runs after platform, which is not complete") {
		t.Errorf("err = %v", err)
	}
	if h.fake.PlanCalled || h.fake.ReadCalled {
		t.Error("a provider was asked to plan or read for a refused phase")
	}
	if err := e.CheckOrder([]string{"platform", "data-apps"}); err != nil {
		t.Errorf("both phases, in order: %v", err)
	}
	st.Close()
	if err := h.run(b.r, "platform"); err != nil {
		t.Fatal(err)
	}
	e, st = h.open(b.r)
	defer st.Close()
	if err := e.CheckOrder([]string{"data-apps"}); err != nil {
		t.Errorf("after platform completed: %v", err)
	}
}
