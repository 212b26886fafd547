package views_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/providertest"
	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/views"
)

func addr(s string) phases.Address {
	a, err := phases.ParseAddress(s)
	if err != nil {
		panic(err)
	}
	return a
}

func newView() (*views.View, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return views.New(views.Options{Stdout: &out, Stderr: &errb}), &out, &errb
}

var runEvents = []engine.Event{
	{Kind: engine.PhaseStarted, Phase: "A"},
	{Kind: engine.StepStarted, Phase: "A", Addr: addr("exec.a"), Attempt: 1},
	{Kind: engine.StepOutput, Phase: "A", Addr: addr("exec.a"), Message: "hello"},
	{Kind: engine.StepDone, Phase: "A", Addr: addr("exec.a"), Duration: 52 * time.Millisecond},
	{Kind: engine.StepStarted, Phase: "A", Addr: addr("exec.b"), Attempt: 1},
	{Kind: engine.StepRetrying, Phase: "A", Addr: addr("exec.b"), Attempt: 1, Message: "retrying in 1s", Error: "boom"},
	{Kind: engine.StepStarted, Phase: "A", Addr: addr("exec.b"), Attempt: 2},
	{Kind: engine.StepFailed, Phase: "A", Addr: addr("exec.b"), Error: "Command Failed: exit 3\nLast lines of output:\n  oops"},
	{Kind: engine.StepSkipped, Phase: "A", Addr: addr("exec.c"), Message: "a step it depends on failed"},
	{Kind: engine.PhaseFailed, Phase: "A", Duration: 1500 * time.Millisecond, Error: "phase A did not complete"},
}

func TestPlainRun(t *testing.T) {
	v, out, _ := newView()
	rv := v.NewRun(views.RunPlain, false)
	rv.Start()
	for _, e := range runEvents {
		if err := rv.Handle(e); err != nil {
			t.Fatal(err)
		}
	}
	rv.Finish()
	want := `Phase A: started
exec.a: started
exec.a | hello
exec.a: done (52ms)
exec.b: started
exec.b: attempt 1 failed, retrying in 1s: boom
exec.b: started (attempt 2)
exec.b: failed: Command Failed: exit 3
    Last lines of output:
      oops
exec.c: skipped: a step it depends on failed
Phase A failed: 1 done, 1 failed, 1 skipped in 1.5s.
`
	if got := out.String(); got != want {
		t.Errorf("plain run:\n%s\nwant:\n%s", got, want)
	}
	rv.Finish() // twice is fine
}

// TestPlainRollbackFailsAndUpToDate: a step that could not be undone, the
// phase it fails, an adopted step and a phase up to date read by their
// kind (no message says which they are).
func TestPlainRollbackFailsAndUpToDate(t *testing.T) {
	v, out, _ := newView()
	rv := v.NewRun(views.RunPlain, true)
	for _, e := range []engine.Event{
		{Kind: engine.PhaseRollbackStarted, Phase: "B"},
		{Kind: engine.StepReverting, Phase: "B", Addr: addr("exec.b")},
		{Kind: engine.StepRevertFailed, Phase: "B", Addr: addr("exec.b"), Error: "Command Failed: exit 2\nrestore.sh: no backup"},
		{Kind: engine.PhaseFailed, Phase: "B", Duration: 4 * time.Millisecond, Error: "rollback of phase B did not complete"},
		{Kind: engine.PhaseUpToDate, Phase: "A"},
		{Kind: engine.StepAdopted, Phase: "C", Addr: addr("exec.c"), Message: "finished before the last run stopped; recorded without running it again"},
	} {
		rv.Handle(e)
	}
	rv.Finish()
	want := `Phase B: rolling back
exec.b: reverting
exec.b: could not be undone: Command Failed: exit 2
    restore.sh: no backup
Phase B failed: 0 done, 1 failed, 0 skipped in 4ms.
Phase A: already complete, nothing to do.
exec.c: done before the last run stopped; recorded without running it again
`
	if got := out.String(); got != want {
		t.Errorf("plain rollback:\n%s\nwant:\n%s", got, want)
	}
}

func TestPlainRollbackAndSummary(t *testing.T) {
	v, out, errb := newView()
	rv := v.NewRun(views.RunPlain, true)
	rv.Start()
	for _, e := range []engine.Event{
		{Kind: engine.PhaseRollbackStarted, Phase: "A"},
		{Kind: engine.StepReverting, Phase: "A", Addr: addr("exec.a"), Message: "run: ./restore.sh"},
		{Kind: engine.StepReverted, Phase: "A", Addr: addr("exec.a"), Duration: 2 * time.Millisecond},
		{Kind: engine.StepReverted, Phase: "A", Addr: addr("http_check.up"), Check: true},
		{Kind: engine.PhaseRolledBack, Phase: "A", Duration: 3 * time.Millisecond},
	} {
		rv.Handle(e)
	}
	rv.Stopping(false)
	rv.Summary()
	rv.Finish()
	want := `Phase A: rolling back
exec.a: reverting: run: ./restore.sh
exec.a: reverted (2ms)
check http_check.up: reverted
Phase A rolled back: 1 undone, 0 failed, 0 skipped in 3ms.
`
	got := out.String()
	if !strings.HasPrefix(got, want) || !strings.Contains(got, "Rollback complete: 1 step undone in") {
		t.Errorf("plain rollback:\n%s\nwant:\n%s", got, want)
	}
	if !strings.Contains(errb.String(), "press Ctrl-C again to abort") {
		t.Errorf("stopping message: %q", errb.String())
	}
}

// TestPlainRunConcurrent feeds events from many goroutines, as parallel
// steps do; run with -race.
func TestPlainRunConcurrent(t *testing.T) {
	v, out, _ := newView()
	rv := v.NewRun(views.RunPlain, false)
	rv.Start()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 200 {
				a := phases.Address{Type: "exec", Name: string(rune('a'+i)) + strings.Repeat("x", j%3)}
				rv.Handle(engine.Event{Kind: engine.StepDone, Phase: "A", Addr: a, Duration: time.Millisecond})
			}
		}()
	}
	wg.Wait()
	rv.Finish()
	if n := strings.Count(out.String(), "\n"); n != 1600 {
		t.Errorf("%d lines, want 1600", n)
	}
}

func TestJSONRun(t *testing.T) {
	v, out, _ := newView()
	rv := v.NewRun(views.RunJSON, false)
	rv.Start()
	for _, e := range runEvents {
		e.Time = time.Unix(0, 0).UTC()
		rv.Handle(e)
	}
	rv.Summary()
	rv.Finish()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(runEvents) {
		t.Fatalf("%d lines for %d events:\n%s", len(lines), len(runEvents), out)
	}
	var ev struct {
		Kind    string `json:"kind"`
		Address string `json:"address"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal([]byte(lines[2]), &ev); err != nil || ev.Kind != "step_output" || ev.Address != "exec.a" || ev.Message != "hello" {
		t.Errorf("line %q: %+v %v", lines[2], ev, err)
	}
}

func TestLiveRun(t *testing.T) {
	var out providertest.SyncBuffer // read while the live view's ticker writes it
	v := views.New(views.Options{Stdout: &out, Stderr: &out, Width: 60})
	rv := v.NewRun(views.RunLive, false)
	rv.Start()
	rv.Handle(engine.Event{Kind: engine.PhaseStarted, Phase: "A"})
	rv.Handle(engine.Event{Kind: engine.StepStarted, Phase: "A", Addr: addr("exec.a"), Time: time.Now()})
	// A few redraws: the second clears the live area the first drew. On a
	// busy machine the ticker may be late, so wait for it, not a time.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "\x1b[J"); {
		if time.Now().After(deadline) {
			t.Fatalf("no redraw cleared the live area in 30s:\n%q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	resume := rv.Pause()
	resume()
	rv.Handle(engine.Event{Kind: engine.StepDone, Phase: "A", Addr: addr("exec.a"), Duration: time.Second})
	rv.Handle(engine.Event{Kind: engine.PhaseCompleted, Phase: "A", Duration: time.Second})
	rv.Summary()
	rv.Finish()
	got := out.String()
	for _, want := range []string{"Phase A started", "exec.a", "\x1b[J", "✓ exec.a (1s)", "Phase A complete: 1 done", "Run complete"} {
		if !strings.Contains(got, want) {
			t.Errorf("live output lacks %q:\n%q", want, got)
		}
	}
	// After Finish, the live area is gone: the output ends with the summary.
	if !strings.HasSuffix(got, ".\n") {
		t.Errorf("live output ends with %q", got[max(0, len(got)-40):])
	}
}

func TestPlan(t *testing.T) {
	v, out, _ := newView()
	p := &engine.Plan{Phases: []*engine.PhasePlan{
		{Name: "A", Description: "first", Complete: true, Steps: []*engine.StepPlan{
			{Addr: addr("exec.a"), Action: providers.NoOp},
		}},
		{Name: "B", Steps: []*engine.StepPlan{
			{Addr: addr("exec.b"), Action: providers.Create, Diff: "run: true"},
			{Addr: addr("exec.c"), Action: providers.Update, ReasonCode: engine.InputsChanged},
			{Addr: addr("exec.d"), Action: providers.Drift, ReasonCode: engine.EffectGone},
			{Addr: addr("exec.e"), Action: providers.NoOp},
			{Addr: addr("exec.f"), Action: providers.NoOp, Recheck: []phases.Address{addr("exec.b")}},
			{Addr: addr("http_check.up"), When: phases.CheckAfter, Action: providers.Create},
			{Addr: addr("http_check.own"), When: phases.CheckAfter, Action: providers.Create, WaitsFor: []phases.Address{addr("exec.b")}},
		}},
	}}
	v.Plan(p)
	got := out.String()
	for _, want := range []string{
		"Phase A (complete)\n  # first\n  = 1 step unchanged\n",
		"Phase B (not complete)\n  + exec.b will run\n      run: true\n",
		"  ~ exec.c will run again: its inputs changed since it ran\n",
		"  ! exec.d has drifted and will run again: its effect is gone\n",
		"  = exec.e unchanged\n",
		"  = exec.f unchanged for now: read again once exec.b ran (what it acts on may change first)\n",
		"  ? check http_check.up will run after the phase's steps\n",
		"  ? check http_check.own will run once exec.b is done\n",
		"Plan: 1 to create, 1 to update, 1 drifted, 3 unchanged.\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("plan lacks %q:\n%s", want, got)
		}
	}
	if c := views.CountPlan(p); c.Changes() != 3 || c.Checks != 2 || !p.HasChanges() {
		t.Errorf("counts: %+v", c)
	}
}

func TestRollbackPlan(t *testing.T) {
	v, out, _ := newView()
	rp := &engine.RollbackPlan{Phases: []*engine.PhaseRollbackPlan{
		{Name: "B", Revert: []engine.RevertEntry{{Addr: addr("exec.b"), Description: "run: undo-b"}}, Irreversible: []phases.Address{addr("exec.x")}},
		{Name: "A", Revert: []engine.RevertEntry{{Addr: addr("helm_release.app"), Description: "uninstall release media/app", Changed: "revision 2 was made outside migrate"}}},
		{Name: "Z"},
	}}
	v.RollbackPlan(rp)
	got := out.String()
	for _, want := range []string{"! changed outside migrate since it ran: revision 2 was made outside migrate\n", "undoing it discards that change too",
		"Phase Z: nothing to undo", "Rollback: 2 to undo, 1 cannot be undone.\n", "CANNOT be undone", "  ! exec.x (phase B)\n", "  - exec.b will be undone: run: undo-b\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("rollback plan lacks %q:\n%s", want, got)
		}
	}
	if strings.Index(got, "CANNOT") > strings.Index(got, "will be undone") {
		t.Errorf("irreversible steps are not listed first:\n%s", got)
	}
}

func TestStatus(t *testing.T) {
	now := time.Now()
	mk := func(a string, st state.Status) *state.StepRecord {
		return &state.StepRecord{Addr: addr(a), Status: st, Attempts: 1, StartedAt: &now, FinishedAt: &now}
	}
	phs := []*phases.Phase{
		{Name: "A", Steps: []*phases.Step{{Addr: addr("exec.a")}}, Checks: []*phases.Step{{Addr: addr("http_check.up"), When: phases.CheckBefore}}},
		{Name: "B", Steps: []*phases.Step{{Addr: addr("exec.b")}, {Addr: addr("exec.c")}}},
		{Name: "C", Steps: []*phases.Step{{Addr: addr("exec.d")}}},
		{Name: "D", Steps: []*phases.Step{{Addr: addr("exec.e")}, {Addr: addr("exec.f")}}},
	}
	failed := mk("exec.c", state.Failed)
	failed.LastError = "exit 1"
	approved := mk("exec.e", state.Done)
	approved.Facts = map[string]string{"approved_by": "ana@lab"}
	snap := &state.Snapshot{Lineage: "l", Serial: 3, Steps: map[string]*state.StepRecord{
		"exec.a": mk("exec.a", state.Done),
		"exec.b": mk("exec.b", state.Done),
		"exec.c": failed,
		"exec.e": approved,
		"exec.z": mk("exec.z", state.Done),
	}}
	s := views.BuildStatus(phs, snap)
	want := []string{views.PhaseComplete, views.PhaseFailed, views.PhaseNotStarted, views.PhaseInProgress}
	for i, p := range s.Phases {
		if p.Status != want[i] {
			t.Errorf("phase %s: %s, want %s", p.Name, p.Status, want[i])
		}
	}
	if len(s.Orphans) != 1 || s.Orphans[0].Addr.String() != "exec.z" {
		t.Errorf("orphans: %+v", s.Orphans)
	}
	if s.Phases[0].Steps[0].Addr.String() != "http_check.up" {
		t.Errorf("before-checks come first: %+v", s.Phases[0].Steps)
	}
	v, out, _ := newView()
	v.Status(s)
	got := out.String()
	for _, want := range []string{"Phase A: complete", "✓ exec.a", "✗ exec.c", "| exit 1", "· exec.d", "approved_by=ana@lab", "no longer has"} {
		if !strings.Contains(got, want) {
			t.Errorf("status lacks %q:\n%s", want, got)
		}
	}
}

func TestGraph(t *testing.T) {
	rb := &phases.Runbook{Phases: []*phases.Phase{
		{Name: "A", Steps: []*phases.Step{{Addr: addr("exec.b")}, {Addr: addr("exec.a")}}},
		{Name: "B", After: []string{"A"}, Steps: []*phases.Step{{Addr: addr("exec.c"), DependsOn: []phases.Address{addr("exec.b"), addr("exec.a")}}},
			Checks: []*phases.Step{{Addr: addr("http_check.up"), When: phases.CheckAfter}}},
	}}
	v, out, _ := newView()
	if err := v.Graph(rb, views.GraphDot); err != nil {
		t.Fatal(err)
	}
	want := `digraph migrate {
  compound = true;
  rankdir = LR;
  node [shape = box];

  subgraph "cluster_A" {
    label = "phase A";
    "phase:A" [shape = point, style = invis];
    "exec.a";
    "exec.b";
  }

  subgraph "cluster_B" {
    label = "phase B";
    "phase:B" [shape = point, style = invis];
    "exec.c";
    "http_check.up" [label = "check http_check.up (after)", shape = hexagon];
  }

  "exec.a" -> "exec.c";
  "exec.b" -> "exec.c";

  "phase:A" -> "phase:B" [ltail = "cluster_A", lhead = "cluster_B", style = dashed];
}
`
	if out.String() != want {
		t.Errorf("dot:\n%s\nwant:\n%s", out, want)
	}
	out.Reset()
	if err := v.Graph(rb, views.GraphMermaid); err != nil {
		t.Fatal(err)
	}
	wantM := `flowchart LR
  subgraph p0["phase A"]
    n0["exec.a"]
    n1["exec.b"]
  end
  subgraph p1["phase B"]
    n2["exec.c"]
    n3{{"check http_check.up (after)"}}
  end
  n0 --> n2
  n1 --> n2
  p0 -.-> p1
`
	if out.String() != wantM {
		t.Errorf("mermaid:\n%s\nwant:\n%s", out, wantM)
	}
}

func TestDiagnostics(t *testing.T) {
	var errb bytes.Buffer
	v := views.New(views.Options{Stdout: &errb, Stderr: &errb})
	v.Diagnostics(phases.Diagnostics{{
		Severity: phases.Error, Summary: "Command Failed", Detail: "It exited with code 1.",
		Subject: &phases.Range{Filename: "main.hcl", StartLine: 7, StartCol: 3, EndLine: 7, EndCol: 9},
	}})
	got := errb.String()
	for _, want := range []string{"Error: Command Failed", "on main.hcl line 7", "It exited with code 1."} {
		if !strings.Contains(got, want) {
			t.Errorf("diagnostic lacks %q:\n%s", want, got)
		}
	}
}

// BenchmarkPlainRun measures what the plain view adds to each event.
func BenchmarkPlainRun(b *testing.B) {
	var out bytes.Buffer
	v := views.New(views.Options{Stdout: &out, Stderr: &out})
	rv := v.NewRun(views.RunPlain, false)
	rv.Start()
	ev := engine.Event{Kind: engine.StepDone, Phase: "A", Addr: addr("wait.w1234"), Duration: 400 * time.Microsecond}
	b.ReportAllocs()
	for b.Loop() {
		rv.Handle(ev)
	}
	rv.Finish()
}

// A rollback that stopped half-way says how far it got; one that finished
// says rolled back though a step it cannot undo stays done; a phase run
// again since is in progress.
func TestStatusAfterRollback(t *testing.T) {
	t0 := time.Now()
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	rec := func(a string, st state.Status, finished time.Duration, undoable bool) *state.StepRecord {
		r := &state.StepRecord{Addr: addr(a), Status: st, Attempts: 1, StartedAt: at(finished - time.Second), FinishedAt: at(finished)}
		if undoable {
			r.Revert = &phases.RevertData{Description: "undo"}
		}
		return r
	}
	ph := []*phases.Phase{{Name: "A", Steps: []*phases.Step{{Addr: addr("exec.a")}, {Addr: addr("exec.b")}, {Addr: addr("exec.c")}}}}
	for _, c := range []struct {
		name   string
		steps  []*state.StepRecord
		want   string
		detail string
	}{
		{"full", []*state.StepRecord{rec("exec.a", state.Reverted, 10*time.Second, false), rec("exec.b", state.Reverted, 9*time.Second, false), rec("exec.c", state.Done, time.Second, false)}, views.PhaseRolledBack, ""},
		{"partial", []*state.StepRecord{rec("exec.a", state.Done, time.Second, true), rec("exec.b", state.Reverted, 9*time.Second, false), rec("exec.c", state.Reverted, 8*time.Second, false)}, views.PhasePartlyRolledBack, "2 undone, 1 still to undo"},
		{"run again", []*state.StepRecord{rec("exec.a", state.Done, 20*time.Second, true), rec("exec.b", state.Reverted, 9*time.Second, false)}, views.PhaseInProgress, ""},
		{"stopped while undoing", []*state.StepRecord{rec("exec.a", state.Reverting, 9*time.Second, true), rec("exec.b", state.Reverted, 8*time.Second, false)}, views.PhasePartlyRolledBack, "while undoing exec.a"},
		{"revert failed", []*state.StepRecord{rec("exec.a", state.RevertFailed, 9*time.Second, true), rec("exec.b", state.Reverted, 9*time.Second, false)}, views.PhaseRollbackFailed, ""},
	} {
		snap := &state.Snapshot{Lineage: "l", Steps: map[string]*state.StepRecord{}}
		for _, r := range c.steps {
			snap.Steps[r.Addr.String()] = r
		}
		s := views.BuildStatus(ph, snap)
		if got := s.Phases[0]; got.Status != c.want || !strings.Contains(got.Detail, c.detail) {
			t.Errorf("%s: phase is %q (%s), want %q (%s)", c.name, got.Status, got.Detail, c.want, c.detail)
		}
		v, out, _ := newView()
		v.Status(s)
		if !strings.Contains(out.String(), "Phase A: "+c.want) {
			t.Errorf("%s: %s", c.name, out)
		}
	}
}

// A failure quoting output lines just shown does not show them again;
// lines not shown (JSON mode, a cut tail) are kept.
func TestFailureOutputNotRepeated(t *testing.T) {
	v, out, _ := newView()
	rv := v.NewRun(views.RunPlain, false)
	a := addr("exec.copy")
	for _, e := range []engine.Event{
		{Kind: engine.StepStarted, Phase: "A", Addr: a, Attempt: 1},
		{Kind: engine.StepOutput, Phase: "A", Addr: a, Message: "rsync: no such file"},
		{Kind: engine.StepFailed, Phase: "A", Addr: a, Error: "Command Failed: exit 23\nLast lines of output:\n  rsync: no such file"},
		{Kind: engine.StepStarted, Phase: "A", Addr: addr("exec.other"), Attempt: 1},
		{Kind: engine.StepFailed, Phase: "A", Addr: addr("exec.other"), Error: "Command Failed: exit 1\nLast lines of output:\n  never shown"},
	} {
		_ = rv.Handle(e)
	}
	rv.Finish()
	got := out.String()
	if strings.Count(got, "rsync: no such file") != 1 || !strings.Contains(got, "exit 23") {
		t.Errorf("the output is repeated:\n%s", got)
	}
	if !strings.Contains(got, "never shown") {
		t.Errorf("an output line not shown was dropped:\n%s", got)
	}
}

// TestRollbackPlanGoneWith: a step whose effects went with a later step
// (discards) is listed as having nothing to undo, and counted apart.
func TestRollbackPlanGoneWith(t *testing.T) {
	v, out, _ := newView()
	del := addr("incus_instance.rehearsal_deleted")
	rp := &engine.RollbackPlan{Phases: []*engine.PhaseRollbackPlan{{Name: "rehearsal", Revert: []engine.RevertEntry{
		{Addr: addr("kubernetes_job.write"), Description: "nothing to undo: it went with " + del.String(), GoneWith: &del},
		{Addr: addr("incus_volume.iso"), Description: "delete volume iso"},
	}}}}
	v.RollbackPlan(rp)
	got := out.String()
	for _, want := range []string{"  · kubernetes_job.write: nothing to undo, it went with incus_instance.rehearsal_deleted\n",
		"  - incus_volume.iso will be undone: delete volume iso\n", "Rollback: 1 to undo, 1 gone with what removed them, 0 cannot be undone.\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("rollback plan lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "kubernetes_job.write will be undone") {
		t.Errorf("a step gone with another is listed as to undo:\n%s", got)
	}
}
