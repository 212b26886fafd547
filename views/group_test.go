package views_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/providertest"
	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/views"
)

// TestGroupedAddressesPrintWhole: the plan, its --json, the run's lines
// and the status print a step of a group by its whole address
// (group.CALL["KEY"].TYPE.NAME), and the JSON documents say its group
// call instance in "group" too; a step of a removed call instance reads
// why it is reverted.
func TestGroupedAddressesPrintWhole(t *testing.T) {
	app, dump := addr(`group.svc["jellyfin"].helm_release.app`), addr("group.db.exec.dump")
	gone := addr(`group.svc["emby"].helm_release.app`)
	p := &engine.Plan{Phases: []*engine.PhasePlan{{Name: "apps", Steps: []*engine.StepPlan{
		{Addr: app, Group: app.GroupPrefix(), Action: providers.Create, ReasonCode: engine.NeverRan, Diff: "chart: jellyfin"},
		{Addr: dump, Group: dump.GroupPrefix(), Action: providers.Update, ReasonCode: engine.InputsChanged},
		{Addr: gone, Group: gone.GroupPrefix(), Action: providers.Revert, ReasonCode: engine.GroupRemoved,
			Why: engine.Why{By: []phases.Address{gone}, Detail: "helm uninstall emby"}},
		{Addr: addr(`group.svc["jellyfin"].http_check.up`), When: phases.CheckAfter, Action: providers.Create},
	}}}}
	v, out, _ := newView()
	v.Plan(p)
	for _, want := range []string{
		"  + group.svc[\"jellyfin\"].helm_release.app will run\n      chart: jellyfin\n",
		"  ~ group.db.exec.dump will run again: its inputs changed since it ran\n",
		"  - group.svc[\"emby\"].helm_release.app will be reverted: its group call instance group.svc[\"emby\"] is no longer in the for_each of group.svc: helm uninstall emby\n",
		"  ? check group.svc[\"jellyfin\"].http_check.up will run after the phase's steps\n",
		"1 to revert",
		"  - revert (a step the runbook no longer has: its block or group call deleted, or its for_each key removed)\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}

	var buf bytes.Buffer
	if err := views.PlanJSON(&buf, p); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Phases []struct {
			Steps []struct {
				Address    string `json:"address"`
				Group      string `json:"group"`
				ReasonCode string `json:"reason_code"`
				Why        struct {
					By []string `json:"by"`
				} `json:"why"`
			} `json:"steps"`
		} `json:"phases"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	steps := doc.Phases[0].Steps
	if s := steps[0]; s.Address != `group.svc["jellyfin"].helm_release.app` || s.Group != `group.svc["jellyfin"]` {
		t.Errorf("plan --json: %+v", s)
	}
	if s := steps[1]; s.Address != "group.db.exec.dump" || s.Group != "group.db" {
		t.Errorf("plan --json: %+v", s)
	}
	if s := steps[2]; s.ReasonCode != "group_removed" || len(s.Why.By) != 1 || s.Why.By[0] != `group.svc["emby"].helm_release.app` {
		t.Errorf("plan --json: %+v", s)
	}

	// The run's lines, plain and JSON.
	events := []engine.Event{
		{Kind: engine.PhaseStarted, Phase: "apps"},
		{Kind: engine.StepStarted, Phase: "apps", Addr: app, Group: app.GroupPrefix(), Attempt: 1},
		{Kind: engine.StepOutput, Phase: "apps", Addr: app, Group: app.GroupPrefix(), Message: "installed"},
		{Kind: engine.StepDone, Phase: "apps", Addr: app, Group: app.GroupPrefix(), Duration: time.Second},
		{Kind: engine.StepReverted, Phase: "apps", Addr: gone, Group: gone.GroupPrefix(), Duration: time.Second},
		{Kind: engine.PhaseCompleted, Phase: "apps", Duration: 2 * time.Second},
	}
	v, out, _ = newView()
	rv := v.NewRun(views.RunPlain, false)
	rv.Start()
	for _, e := range events {
		if err := rv.Handle(e); err != nil {
			t.Fatal(err)
		}
	}
	rv.Finish()
	for _, want := range []string{
		"group.svc[\"jellyfin\"].helm_release.app: started\n",
		"group.svc[\"jellyfin\"].helm_release.app | installed\n",
		"group.svc[\"jellyfin\"].helm_release.app: done (1s)\n",
		"group.svc[\"emby\"].helm_release.app",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plain run lacks %q:\n%s", want, out)
		}
	}
	v, out, _ = newView()
	rv = v.NewRun(views.RunJSON, false)
	rv.Start()
	for _, e := range events {
		rv.Handle(e)
	}
	rv.Finish()
	var ev struct {
		Kind    string `json:"kind"`
		Address string `json:"address"`
		Group   string `json:"group"`
	}
	if line := strings.Split(out.String(), "\n")[2]; json.Unmarshal([]byte(line), &ev) != nil || ev.Kind != "step_output" || ev.Address != app.String() || ev.Group != `group.svc["jellyfin"]` {
		t.Errorf("json event %q: %+v", line, ev)
	}

	// The status.
	now := time.Now()
	phs := []*phases.Phase{{Name: "apps", Steps: []*phases.Step{{Addr: app}, {Addr: dump}}}}
	snap := &state.Snapshot{Steps: map[string]*state.StepRecord{
		app.String():  {Addr: app, Status: state.Done, Attempts: 1, StartedAt: &now, FinishedAt: &now},
		gone.String(): {Addr: gone, Phase: "apps", Status: state.Done, Attempts: 1},
	}}
	s := views.BuildStatus(phs, snap)
	v, out, _ = newView()
	v.Status(s)
	for _, want := range []string{"✓ group.svc[\"jellyfin\"].helm_release.app", "· group.db.exec.dump", "group.svc[\"emby\"].helm_release.app"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"address":"group.svc[\"jellyfin\"].helm_release.app","group":"group.svc[\"jellyfin\"]"`, `"address":"group.db.exec.dump","group":"group.db"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("status --json lacks %s:\n%s", want, b)
		}
	}
}

// TestLiveRunCutsTheGroupNotTheStep: on a narrow terminal, the live
// area cuts a long group call instance, keeping the step's own address
// whole at the end of its line.
func TestLiveRunCutsTheGroupNotTheStep(t *testing.T) {
	var out providertest.SyncBuffer // read while the live view's ticker writes it
	v := views.New(views.Options{Stdout: &out, Stderr: &out, Width: 48})
	rv := v.NewRun(views.RunLive, false)
	rv.Start()
	a := addr(`group.media["jellyfin-with-a-long-name"].helm_release.app`)
	rv.Handle(engine.Event{Kind: engine.PhaseStarted, Phase: "apps"})
	rv.Handle(engine.Event{Kind: engine.StepStarted, Phase: "apps", Addr: a, Time: time.Now()})
	// The live line, once drawn; on a busy machine the ticker may be late.
	want := "…helm_release.app "
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), want); {
		if time.Now().After(deadline) {
			t.Fatalf("no live line ends with the step's address (%q) in 30s:\n%q", want, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	rv.Handle(engine.Event{Kind: engine.StepDone, Phase: "apps", Addr: a, Duration: time.Second})
	rv.Finish()
	if !strings.Contains(out.String(), a.String()) {
		t.Errorf("the done line does not print the whole address %s:\n%q", a, out.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, want) && utf8.RuneCountInString(stripANSI(line)) > 48 {
			t.Errorf("live line wider than the terminal: %q", line)
		}
	}
}

func stripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b {
			for i < len(s) && !(s[i] >= 'A' && s[i] <= 'Z' || s[i] >= 'a' && s[i] <= 'z') {
				i++
			}
			continue
		}
		if s[i] != '\r' {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}
