package engine_test

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/fake"
	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/views"
)

// nodeRunbook: fake_step.boot (provider fake.default) makes an address;
// the provider node.talos is configured from its output and runs
// fake_step.config and fake_step.kubeconfig.
func nodeRunbook() *phases.Runbook {
	b := newRB()
	node := &phases.ProviderConfig{
		Type: "node", Name: "talos", DependsOn: []phases.Address{addr("boot")},
		Config: phases.EvaluatorFunc(func(out map[phases.Address]cty.Value) (cty.Value, phases.Diagnostics) {
			return cty.ObjectVal(map[string]cty.Value{"endpoint": out[addr("boot")].GetAttr("value")}), nil
		}),
	}
	b.r.Providers = append(b.r.Providers, node)
	p := b.phase("platform")
	b.step(p, "boot").Config = value("10.0.0.9")
	for _, name := range []string{"config", "kubeconfig"} {
		s := b.step(p, name, "boot")
		s.Provider = node.Key()
	}
	return b.r
}

// lazyHarness opens an engine over nodeRunbook with two fakes: f for
// fake.default, node for node.talos.
type lazyHarness struct {
	t       *testing.T
	dir     string
	f, node *fake.Provider
	mu      sync.Mutex
	// configured records, per Configure of node, the endpoint it got and
	// how often boot had been applied by then.
	configured []string
}

func newLazyHarness(t *testing.T) *lazyHarness {
	h := &lazyHarness{t: t, dir: t.TempDir(), f: fake.New(), node: fake.New()}
	h.node.ConfigureFn = func(_ context.Context, req providers.ConfigureRequest) providers.ConfigureResponse {
		h.mu.Lock()
		defer h.mu.Unlock()
		ep := req.Config.GetAttr("endpoint")
		if ep.IsKnown() && !ep.IsNull() {
			h.configured = append(h.configured, ep.AsString()+" boot applied "+strings.Repeat("x", h.f.Applied("fake_step.boot")))
		} else {
			h.configured = append(h.configured, "(unknown)")
		}
		return providers.ConfigureResponse{}
	}
	return h
}

func (h *lazyHarness) open() (*engine.Engine, *state.Local) {
	h.t.Helper()
	st, err := state.Open(h.dir, state.Options{Lock: state.NewLockInfo("test"), MigrateVersion: "test"})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { st.Close() })
	e, diags := engine.New(context.Background(), engine.Options{
		Runbook:   nodeRunbook(),
		Factories: map[string]providers.Factory{"fake": fake.Factory(h.f), "node": fake.Factory(h.node)},
		State:     st,
	})
	if diags.HasErrors() {
		h.t.Fatal(diags.Err())
	}
	h.t.Cleanup(func() { e.Close() })
	return e, st
}

func (h *lazyHarness) configures() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.configured...)
}

func TestProviderConfiguredFromStepOutputs(t *testing.T) {
	t.Parallel()
	h := newLazyHarness(t)
	e, st := h.open()
	if got := h.configures(); len(got) != 0 {
		t.Fatalf("node configured when the engine started: %v", got)
	}

	// Before boot ran, the provider's steps cannot be planned: deferred,
	// naming the step, without configuring the provider with unknowns.
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	for _, name := range []string{"config", "kubeconfig"} {
		sp := stepPlan(t, plan, name)
		if !sp.Deferred || sp.Action != providers.Create || !reflect.DeepEqual(sp.KnownAfter, []phases.Address{addr("boot")}) {
			t.Errorf("%s: action %s, deferred %v, known after %v", name, sp.Action, sp.Deferred, sp.KnownAfter)
		}
		if !strings.Contains(views.Because(sp.ReasonCode, sp.Why), "(known after fake_step.boot)") || !strings.Contains(views.Because(sp.ReasonCode, sp.Why), "node.talos") {
			t.Errorf("%s: detail %q does not name the provider and the step", name, views.Because(sp.ReasonCode, sp.Why))
		}
		if !strings.Contains(sp.Diff, "fake_step.boot") {
			t.Errorf("%s: diff %q does not name fake_step.boot", name, sp.Diff)
		}
	}
	if got := h.configures(); len(got) != 0 {
		t.Fatalf("node configured by the plan: %v", got)
	}
	if h.node.PlanCalled {
		t.Fatal("node asked to plan before it was configured")
	}

	// The run configures it once, after boot applied, with boot's output.
	if err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := h.configures(), []string{"10.0.0.9 boot applied x"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Configure calls = %q, want %q", got, want)
	}
	if h.node.Applied("fake_step.config") != 1 || h.node.Applied("fake_step.kubeconfig") != 1 {
		t.Errorf("node applied config %d, kubeconfig %d times", h.node.Applied("fake_step.config"), h.node.Applied("fake_step.kubeconfig"))
	}

	// A new engine over the state: boot's output is recorded, so the plan
	// configures the provider with it and plans the steps as usual.
	e.Close()
	st.Close()
	e, _ = h.open()
	plan, diags = e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	if sp := stepPlan(t, plan, "config"); sp.Deferred || sp.Action != providers.NoOp {
		t.Errorf("config after the run: action %s, deferred %v", sp.Action, sp.Deferred)
	}
	if got := h.configures(); len(got) != 2 || got[1] != "10.0.0.9 boot applied x" {
		t.Errorf("Configure calls = %q, want a second one with the recorded output", got)
	}
}

// A provider whose configuration still waits when its step is about to
// run (the runbook did not make the step depend on what the provider
// needs) fails the step, naming what it waits for; it is never configured
// with unknown values.
func TestProviderNotReadyFailsTheStep(t *testing.T) {
	t.Parallel()
	h := newLazyHarness(t)
	rb := nodeRunbook()
	for _, s := range rb.Phases[0].Steps {
		if s.Provider == "node.talos" {
			s.DependsOn = nil
		}
	}
	// boot fails, so the provider's steps run without its output.
	rb.Phases[0].Steps[0].Config = phases.Static(cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal("x"), "fail": cty.True}))
	st, err := state.Open(h.dir, state.Options{Lock: state.NewLockInfo("test"), MigrateVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e, diags := engine.New(context.Background(), engine.Options{
		Runbook:   rb,
		Factories: map[string]providers.Factory{"fake": fake.Factory(h.f), "node": fake.Factory(h.node)},
		State:     st, Parallelism: 1,
	})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	defer e.Close()
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	err = e.Run(context.Background(), context.Background(), plan, engine.RunOptions{})
	if err == nil {
		t.Fatal("run succeeded")
	}
	rec, _ := st.Step(addr("config"))
	if rec == nil || rec.Status != state.Failed || !strings.Contains(rec.LastError, "node.talos") || !strings.Contains(rec.LastError, "fake_step.boot") {
		t.Errorf("config record: %+v", rec)
	}
	if got := h.configures(); len(got) != 0 {
		t.Errorf("node configured with unknown values: %v", got)
	}
}

// Rollback configures the provider from the recorded outputs (once) and
// undoes its steps before the step its block uses.
func TestRollbackConfiguresProviderFromRecordedOutputs(t *testing.T) {
	t.Parallel()
	h := newLazyHarness(t)
	e, st := h.open()
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	if err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	e.Close()
	st.Close()

	e, st = h.open()
	rp, err := e.PlanRollback(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Rollback(context.Background(), context.Background(), rp); err != nil {
		t.Fatal(err)
	}
	if got, want := h.configures(), []string{"10.0.0.9 boot applied x", "10.0.0.9 boot applied x"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Configure calls = %q, want %q", got, want)
	}
	for _, name := range []string{"config", "kubeconfig"} {
		if n := h.node.Reverted("fake_step." + name); n != 1 {
			t.Errorf("%s reverted %d times", name, n)
		}
		if rec, _ := st.Step(addr(name)); rec == nil || rec.Status != state.Reverted {
			t.Errorf("%s: %+v", name, rec)
		}
	}
	if rec, _ := st.Step(addr("boot")); rec == nil || rec.Status != state.Reverted {
		t.Errorf("boot: %+v", rec)
	}
}
