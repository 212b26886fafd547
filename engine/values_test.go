package engine_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// A step whose input comes from a done step with corrupt recorded outputs
// is told so, naming both steps, not that its input "has not run".
func TestCorruptRecordedOutputsAreNamed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("platform")
	b.step(p, "a")
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	// The state holds outputs of a type that does not exist (an edit, or
	// a bug of an older migrate); the snapshot's checksum cannot see it.
	st, err := state.Open(h.dir, state.Options{Lock: state.NewLockInfo("test")})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := st.Step(addr("a"))
	rec.Outputs = json.RawMessage(`{"value":"x","type":"strin"}`)
	if err := st.Checkpoint(rec); err != nil {
		t.Fatal(err)
	}
	st.Close()

	p.Steps = append(p.Steps, mkStep(p, "b", phases.EvaluatorFunc(func(out map[phases.Address]cty.Value) (cty.Value, phases.Diagnostics) {
		return cty.ObjectVal(map[string]cty.Value{"value": out[addr("a")]}), nil
	}), "a"))
	err = h.run(b.r)
	if err == nil {
		t.Fatal("run succeeded")
	}
	for _, want := range []string{"Corrupt Recorded Outputs", "fake_step.b depends on fake_step.a", "corrupt", "state.json.backup"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if s := h.status("b"); s != state.Pending {
		t.Errorf("b is %s, want pending", s)
	}
}

// A huge error reaches the state and the hooks cut, with a pointer to the
// log, which has it whole (and with secrets redacted, like the rest).
func TestHugeErrorsAreCutAndLogged(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	lg, err := state.OpenLog(h.dir, "run")
	if err != nil {
		t.Fatal(err)
	}
	h.log = lg
	b := newRB()
	b.r.Secrets = []string{"hunter2-canary"}
	p := b.phase("apps")
	s := b.step(p, "big")
	s.Retry = phases.RetryPolicy{Attempts: 2}
	huge := strings.Repeat("y", 1<<20)
	h.fake.ApplyFn = func(context.Context, providers.ApplyRequest) providers.ApplyResponse {
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Boom", "hunter2-canary %s end", huge)}
	}
	if err := h.run(b.r); err == nil {
		t.Fatal("run succeeded")
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(h.dir, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := st.Step(addr("big"))
	st.Close()
	want := "bytes cut; full error in " + lg.Path() + ") …"
	if len(rec.LastError) > state.MaxErrorBytes+200 || !strings.Contains(rec.LastError, want) || !strings.HasSuffix(rec.LastError, "y end") {
		t.Errorf("last_error has %d bytes, ends %q", len(rec.LastError), rec.LastError[max(0, len(rec.LastError)-200):])
	}
	kinds := 0
	for _, ev := range h.events {
		if len(ev.Error) > state.MaxErrorBytes+200 {
			t.Errorf("%s event with an error of %d bytes", ev.Kind, len(ev.Error))
		}
		if ev.Kind == engine.StepRetrying || ev.Kind == engine.StepFailed {
			kinds++
		}
	}
	if kinds != 2 {
		t.Errorf("%d retrying/failed events, want 2", kinds)
	}
	log, err := os.ReadFile(lg.Path())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), ` plan: {"format_version":`) {
		t.Errorf("the log does not have the plan:\n%.500s", log)
	}
	if n := strings.Count(string(log), "(sensitive value) "+huge+" end"); n != 2 || strings.Contains(string(log), "hunter2") {
		t.Errorf("the log has the whole error %d times (want 2: one retry, one failure), or the secret", n)
	}
}
