package engine_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/fake"
	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/views"
)

// keyedRunbook is one step whose only attribute is a weak password.
func keyedRunbook(password string) (*phases.Runbook, cty.Value) {
	b := newRB()
	p := b.phase("p")
	cfg := cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal(password).Mark(phases.SensitiveMark)})
	p.Steps = append(p.Steps, mkStep(p, "login", phases.Static(cfg)))
	b.r.Secrets = []string{password}
	return b.r, cfg
}

// openKeyed is harness.open with an input key; close the state after.
func (h *harness) openKeyed(r *phases.Runbook, key []byte) (*engine.Engine, *state.Local) {
	h.t.Helper()
	st, err := state.Open(h.dir, state.Options{Lock: state.NewLockInfo("test"), MigrateVersion: "test"})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { st.Close() })
	e, diags := engine.New(context.Background(), engine.Options{
		Runbook: r, Factories: map[string]providers.Factory{"fake": fake.Factory(h.fake)},
		State: st, InputKey: key,
	})
	if diags.HasErrors() {
		h.t.Fatal(diags.Err())
	}
	return e, st
}

// planRun plans and runs with key, returning the step's plan.
func (h *harness) planRun(r *phases.Runbook, key []byte) *engine.StepPlan {
	h.t.Helper()
	e, st := h.openKeyed(r, key)
	defer st.Close()
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		h.t.Fatal(diags.Err())
	}
	if err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{}); err != nil {
		h.t.Fatal(err)
	}
	return plan.Phases[0].Steps[0]
}

// setRecordedHash writes hash as the login step's input hash, as an
// older migrate wrote it.
func (h *harness) setRecordedHash(hash string) {
	h.t.Helper()
	st, err := state.Open(h.dir, state.Options{Lock: state.NewLockInfo("test"), MigrateVersion: "test"})
	if err != nil {
		h.t.Fatal(err)
	}
	defer st.Close()
	rec, ok := st.Step(addr("login"))
	if !ok {
		h.t.Fatal("no record of fake_step.login")
	}
	rec.InputHash = hash
	if err := st.Checkpoint(rec); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) recordedHash() string {
	h.t.Helper()
	st, err := state.Open(h.dir, state.Options{})
	if err != nil {
		h.t.Fatal(err)
	}
	defer st.Close()
	rec, ok := st.Step(addr("login"))
	if !ok {
		h.t.Fatal("no record of fake_step.login")
	}
	return rec.InputHash
}

// guess is what someone holding the state computes for a candidate
// password: the plain SHA-256 of the step's attributes.
func guess(t *testing.T, cfg cty.Value) string {
	plain, _ := cfg.UnmarkDeep()
	ty, _ := ctyjson.MarshalType(plain.Type())
	b, err := ctyjson.Marshal(plain, plain.Type())
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(append(append(ty, 0), b...))
	return hex.EncodeToString(sum[:])
}

// TestInputHashIsKeyed: with an input key, the state's input hash of a
// step with a weak password is not the plain hash anyone holding the
// state could compute for a guess, nor is it in a saved plan; the key's
// holder still sees the step unchanged.
func TestInputHashIsKeyed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, cfg := keyedRunbook("hunter2")
	key := []byte("0123456789abcdef0123456789abcdef")
	h.planRun(r, key)
	rec := h.recordedHash()
	if !strings.HasPrefix(rec, "hmac-sha256-v2:") || rec == guess(t, cfg) || strings.Contains(rec, guess(t, cfg)) {
		t.Errorf("the recorded input hash %q is the plain hash a guess reproduces", rec)
	}
	planFile := filepath.Join(t.TempDir(), "p.json")
	e, st := h.openKeyed(r, key)
	plan, _ := e.Plan(context.Background(), engine.PlanOptions{})
	st.Close()
	if err := engine.WritePlan(planFile, plan); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(planFile); strings.Contains(string(b), guess(t, cfg)) || strings.Contains(string(b), sha256Hex("hunter2")) {
		t.Errorf("the saved plan holds a plain hash of the password:\n%s", b)
	}
	if got := plan.Phases[0].Steps[0]; got.Action != providers.NoOp {
		t.Errorf("with the same key the step is planned %v (%s), want no-op", got.Action, views.Because(got.ReasonCode, got.Why))
	}

	// Another key cannot compare: it says so.
	e, st = h.openKeyed(r, []byte("another key, another identity...."))
	plan, _ = e.Plan(context.Background(), engine.PlanOptions{})
	st.Close()
	if got := plan.Phases[0].Steps[0]; got.Action != providers.Update || !strings.Contains(views.Because(got.ReasonCode, got.Why), "another key") {
		t.Errorf("under another key: %v (%s)", got.Action, views.Because(got.ReasonCode, got.Why))
	}
}

// TestPlainInputHashRewrittenKeyed: a record hashed before hashes were
// keyed is compared the plain way (the step stays done), and the next run
// of its phase, finding it unchanged, writes it keyed.
func TestPlainInputHashRewrittenKeyed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, cfg := keyedRunbook("hunter2")
	h.planRun(r, nil)
	if rec := h.recordedHash(); strings.Contains(rec, "hmac") {
		t.Fatalf("without a key the record holds %q, a keyed hash", rec)
	}
	h.setRecordedHash(guess(t, cfg)) // as migrate wrote it before hashes were keyed
	// A step added to the phase makes it run again.
	key := []byte("0123456789abcdef0123456789abcdef")
	p := r.Phases[0]
	p.Steps = append(p.Steps, mkStep(p, "added", value("added")))
	sp := h.planRun(r, key)
	if sp.Action != providers.NoOp {
		t.Errorf("an old record is planned %v (%s), want no-op", sp.Action, views.Because(sp.ReasonCode, sp.Why))
	}
	if n := h.fake.Applied("fake_step.login"); n != 1 {
		t.Errorf("the step was applied %d times, want once", n)
	}
	rec := h.recordedHash()
	if !strings.HasPrefix(rec, "hmac-sha256-v2:") {
		t.Errorf("the old record was not written again keyed: %q", rec)
	}
	if sp := h.planRun(r, key); sp.Action != providers.NoOp {
		t.Errorf("after the rewrite the step is planned %v (%s)", sp.Action, views.Because(sp.ReasonCode, sp.Why))
	}
}

// TestAttributeAddedLaterKeepsStepDone: a step type that gains an
// attribute (a new release of its provider), left unset, does not make
// its done steps run again. A record of the form before (nulls hashed
// too) is first compared as it was made, then written in the new form;
// from then on attributes may be added.
func TestAttributeAddedLaterKeepsStepDone(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef0123456789abcdef")
	withNew := func(cfg cty.Value) cty.Value {
		attrs := cfg.AsValueMap()
		attrs["digest"] = cty.NullVal(cty.String)
		attrs["options"] = cty.NullVal(cty.Object(map[string]cty.Type{"wait": cty.Bool}))
		return cty.ObjectVal(attrs)
	}
	for _, form := range []string{"v2", "v1"} {
		t.Run(form, func(t *testing.T) {
			h := newHarness(t)
			r, cfg := keyedRunbook("hunter2")
			h.planRun(r, key)
			if form == "v1" {
				// As a record of the release before was hashed: the
				// attributes with their nulls, keyed.
				mac := hmac.New(sha256.New, key)
				ty, _ := ctyjson.MarshalType(cty.Object(map[string]cty.Type{"value": cty.String}))
				b, _ := ctyjson.Marshal(cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal("hunter2")}), cty.Object(map[string]cty.Type{"value": cty.String}))
				mac.Write(append(append(ty, 0), b...))
				mac.Write([]byte{0})
				id := hmac.New(sha256.New, key)
				id.Write([]byte("migrate input key id"))
				h.setRecordedHash("hmac-sha256:" + hex.EncodeToString(id.Sum(nil))[:8] + ":" + hex.EncodeToString(mac.Sum(nil)))
				p := r.Phases[0] // a step added, so that the phase runs and rewrites the record
				p.Steps = append(p.Steps, mkStep(p, "added", value("added")))
				if sp := h.planRun(r, key); sp.Action != providers.NoOp {
					t.Fatalf("a record of the form before is planned %v (%s), want no-op", sp.Action, views.Because(sp.ReasonCode, sp.Why))
				}
				if rec := h.recordedHash(); !strings.HasPrefix(rec, "hmac-sha256-v2:") {
					t.Fatalf("the record of the form before was not written again: %q", rec)
				}
			}
			r.Phases[0].Steps[0].Config = phases.Static(withNew(cfg))
			if sp := h.planRun(r, key); sp.Action != providers.NoOp {
				t.Errorf("with a new attribute left unset the step is planned %v (%s), want no-op", sp.Action, views.Because(sp.ReasonCode, sp.Why))
			}
			if n := h.fake.Applied("fake_step.login"); n != 1 {
				t.Errorf("the step was applied %d times, want once", n)
			}
			// A value set in the new attribute is a change.
			attrs := withNew(cfg).AsValueMap()
			attrs["digest"] = cty.StringVal("sha256:00")
			r.Phases[0].Steps[0].Config = phases.Static(cty.ObjectVal(attrs))
			if sp := h.planRun(r, key); sp.Action != providers.Update {
				t.Errorf("with the new attribute set the step is planned %v (%s), want update", sp.Action, views.Because(sp.ReasonCode, sp.Why))
			}
		})
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
