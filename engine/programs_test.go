package engine_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/fake"
	"github.com/homelab-migrate/migrate/state"
)

// programmed is the fake provider run as a program: Program answers
// *prog, or err.
type programmed struct {
	*fake.Provider
	prog *providers.Program
	err  *error
}

func (p programmed) Program() (providers.Program, error) { return *p.prog, *p.err }

// TestPlanNamesPrograms: the plan, and the rollback's, name the program of
// each provider the selected phases use, once per file; a program refused
// is an error of the plan; a saved plan is refused when the program
// changed since.
func TestPlanNamesPrograms(t *testing.T) {
	prog := providers.Program{Provider: "fake", Path: "/bin/migrate-provider-fake", SHA256: "aa", Verified: true}
	var refused error
	b := &rb{r: &phases.Runbook{Dir: ".", Providers: []*phases.ProviderConfig{{Type: "fake", Name: "a"}, {Type: "fake", Name: "b"}}}}
	first := b.phase("first")
	for _, key := range []string{"fake.a", "fake.b"} {
		s := mkStep(first, strings.TrimPrefix(key, "fake."), value("v"))
		s.Provider = key
		first.Steps = append(first.Steps, s)
	}
	st, err := state.Open(t.TempDir(), state.Options{Lock: state.NewLockInfo("test"), MigrateVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f := fake.New()
	e, diags := engine.New(context.Background(), engine.Options{Runbook: b.r, State: st, Factories: map[string]providers.Factory{
		"fake": func() providers.Interface { return programmed{f, &prog, &refused} },
	}})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() || !slices.Equal(plan.Programs, []providers.Program{prog}) {
		t.Fatalf("the plan names %+v (%v), want the one program once", plan.Programs, diags)
	}
	if err := e.CheckPrograms(plan); err != nil {
		t.Fatalf("the same program refused: %v", err)
	}
	if rp, err := e.PlanRollback(nil); err != nil || !slices.Equal(rp.Programs, []providers.Program{prog}) {
		t.Fatalf("the rollback plan names %+v (%v)", rp, err)
	}

	saved := *plan
	prog.SHA256 = "bb"
	if err := e.CheckPrograms(&saved); err == nil || !strings.Contains(err.Error(), "sha256 aa") || !strings.Contains(err.Error(), "sha256 bb") {
		t.Errorf("a saved plan whose program changed: %v", err)
	}

	refused = errors.New("its sha256 differs")
	_, diags = e.Plan(context.Background(), engine.PlanOptions{})
	if !diags.HasErrors() || !strings.Contains(diags.Err().Error(), "Provider Program Refused") || !strings.Contains(diags.Err().Error(), "its sha256 differs") {
		t.Errorf("a refused program: %v", diags)
	}
	if _, err := e.PlanRollback(nil); err == nil || !strings.Contains(err.Error(), "its sha256 differs") {
		t.Errorf("a rollback with a refused program: %v", err)
	}
}

// TestPlanNamesTheProgramThatUndoesADeletedStep: a provider no step of
// the runbook uses any more, but that undoes a deleted step (its record
// names it), starts its program for that: the plan names it, as the
// rollback's does.
func TestPlanNamesTheProgramThatUndoesADeletedStep(t *testing.T) {
	prog := providers.Program{Provider: "prog", Path: "/bin/migrate-provider-prog", SHA256: "aa", Verified: true}
	var ok error
	f := fake.New()
	dir := t.TempDir()
	build := func(steps ...string) *phases.Runbook {
		b := &rb{r: &phases.Runbook{Dir: ".", Providers: []*phases.ProviderConfig{{Type: "fake", Name: "default"}, {Type: "prog", Name: "p"}}}}
		p := b.phase("p")
		b.step(p, "a")
		for _, n := range steps {
			b.step(p, n).Provider = "prog.p"
		}
		return b.r
	}
	open := func(r *phases.Runbook) (*engine.Engine, func()) {
		st, err := state.Open(dir, state.Options{Lock: state.NewLockInfo("test"), MigrateVersion: "test"})
		if err != nil {
			t.Fatal(err)
		}
		e, diags := engine.New(context.Background(), engine.Options{Runbook: r, State: st, Factories: map[string]providers.Factory{
			"fake": fake.Factory(f),
			"prog": func() providers.Interface { return programmed{f, &prog, &ok} },
		}})
		if diags.HasErrors() {
			t.Fatal(diags.Err())
		}
		return e, func() { st.Close() }
	}
	e, done := open(build("x"))
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	if err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	done()
	e, done = open(build())
	defer done()
	plan, diags = e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() || !slices.Equal(plan.Programs, []providers.Program{prog}) {
		t.Fatalf("the plan that undoes fake_step.x names the programs %+v (%v), want prog's", plan.Programs, diags)
	}
	if err := e.CheckPrograms(plan); err != nil {
		t.Fatalf("the same program refused: %v", err)
	}
	if rp, err := e.PlanRollback(nil); err != nil || !slices.Equal(rp.Programs, []providers.Program{prog}) {
		t.Fatalf("the rollback plan names %+v (%v)", rp, err)
	}
}
