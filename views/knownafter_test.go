package views_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/views"
)

func TestPlanShowsWhatValuesWaitFor(t *testing.T) {
	first := addr("exec.first")
	p := &engine.Plan{Phases: []*engine.PhasePlan{{Name: "A", Steps: []*engine.StepPlan{
		{Addr: first, Action: providers.Create, Diff: "run: true"},
		{Addr: addr("exec.second"), Action: providers.Create, KnownAfter: []phases.Address{first}, Diff: "run: echo (known after exec.first)"},
		// A provider's own words for a diff it could not make.
		{Addr: addr("exec.third"), Action: providers.Create, KnownAfter: []phases.Address{first}, Diff: "will be planned later"},
	}}}}
	v, out, _ := newView()
	v.Plan(p)
	got := out.String()
	for _, want := range []string{
		"  + exec.second will run\n      run: echo (known after exec.first)\n  + exec.third",
		"  + exec.third will run\n      (known after exec.first)\n      will be planned later\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("plan lacks %q:\n%s", want, got)
		}
	}
	var js bytes.Buffer
	if err := views.PlanJSON(&js, p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), `"known_after": [`+"\n"+`            "exec.first"`) {
		t.Errorf("JSON plan lacks known_after:\n%s", js.String())
	}
}

func TestRunShowsTheFreshPlan(t *testing.T) {
	v, out, _ := newView()
	rv := v.NewRun(views.RunPlain, false)
	rv.Start()
	for _, e := range []engine.Event{
		{Kind: engine.StepPlanned, Phase: "A", Addr: addr("exec.second"), Message: "run: echo 'code 0'\nenv: none"},
		{Kind: engine.StepPlanned, Phase: "A", Addr: addr("exec.third")},
	} {
		if err := rv.Handle(e); err != nil {
			t.Fatal(err)
		}
	}
	rv.Finish()
	want := "exec.second: planned now that its inputs are known:\n    run: echo 'code 0'\n    env: none\n" +
		"exec.third: planned now that its inputs are known (no diff)\n"
	if got := out.String(); got != want {
		t.Errorf("run:\n%s\nwant:\n%s", got, want)
	}
}
