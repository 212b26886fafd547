package engine_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/fake"
	"github.com/homelab-migrate/migrate/state"
)

// fileReader is a fake whose step "secret" digests a file on disk (as
// kubernetes_secret digests its files) and whose step "pull" writes that
// file anew, with other bytes each time (as incus_file's pull encrypts it
// with age under a new nonce).
type fileReader struct {
	*fake.Provider
	h    *harness
	file string
	st   *state.Local // the state plan opened, closed by run
}

func newFileReader(t *testing.T) *fileReader {
	h := newHarness(t)
	f := &fileReader{Provider: h.fake, h: h, file: filepath.Join(h.dir, "signing.key.age")}
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		if req.Addr == addr("pull") {
			f.write(t)
		}
		return providers.ApplyResponse{Revert: &providers.RevertData{Description: "undo"}}
	}
	return f
}

// write gives the file new random bytes.
func (f *fileReader) write(t *testing.T) {
	b := make([]byte, 16)
	rand.Read(b)
	if err := os.WriteFile(f.file, []byte(hex.EncodeToString(b)), 0o600); err != nil {
		t.Error(err)
	}
}

func (f *fileReader) InputDigest(_ context.Context, req providers.DigestRequest) providers.DigestResponse {
	if req.Addr != addr("secret") {
		return providers.DigestResponse{}
	}
	b, err := os.ReadFile(f.file)
	if err != nil {
		return providers.DigestResponse{Diagnostics: phases.Errorf("Unreadable", "%v", err)}
	}
	return providers.DigestResponse{Digest: string(b)}
}

// plan opens the state and an engine over it, and plans every phase.
func (f *fileReader) plan(r *phases.Runbook) (*engine.Engine, *engine.Plan) {
	f.h.t.Helper()
	st, err := state.Open(f.h.dir, state.Options{Lock: state.NewLockInfo("test")})
	if err != nil {
		f.h.t.Fatal(err)
	}
	f.h.t.Cleanup(func() { st.Close() })
	f.st = st
	e, diags := engine.New(context.Background(), engine.Options{Runbook: r, State: st,
		Factories: map[string]providers.Factory{"fake": func() providers.Interface { return f }},
		Hooks: []engine.Hook{engine.HookFunc(func(ev engine.Event) error {
			f.h.mu.Lock()
			f.h.events = append(f.h.events, ev)
			f.h.mu.Unlock()
			return nil
		})}})
	if diags.HasErrors() {
		f.h.t.Fatal(diags.Err())
	}
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		f.h.t.Fatal(diags.Err())
	}
	return e, plan
}

// run runs plan and closes the state, and says why secret failed, if it did.
func (f *fileReader) run(e *engine.Engine, plan *engine.Plan) error {
	defer f.st.Close()
	err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{})
	f.h.mu.Lock()
	defer f.h.mu.Unlock()
	for _, ev := range f.h.events {
		if ev.Kind == engine.StepFailed && ev.Addr == addr("secret") {
			return errors.New(ev.Error)
		}
	}
	return err
}

// pullThenSecret is the homelab's signing key: secret reads what pull
// writes, and depends on it through its namespace.
func pullThenSecret(deep bool) *phases.Runbook {
	b := newRB()
	p := b.phase("p")
	b.step(p, "pull")
	if deep {
		b.step(p, "ns", "pull")
		b.step(p, "secret", "ns")
	} else {
		b.step(p, "ns")
		b.step(p, "secret", "ns", "pull")
	}
	return b.r
}

// A run killed inside a step that writes a file leaves that file behind;
// the next run plans with it, then applies the step again, which writes
// the file anew: the step that reads it must not be refused as if its
// inputs had changed since the plan (they are known only after the step
// that writes them, like its outputs).
func TestFilesWrittenByAStepThatRunsAgainAreKnownAfterIt(t *testing.T) {
	t.Parallel()
	for _, deep := range []bool{false, true} {
		t.Run(map[bool]string{false: "direct", true: "through-another-step"}[deep], func(t *testing.T) {
			t.Parallel()
			f := newFileReader(t)
			r := pullThenSecret(deep)
			if deep {
				// Everything ran once; ns stays done and is not
				// applied again.
				e, plan := f.plan(r)
				if err := f.run(e, plan); err != nil {
					t.Fatal(err)
				}
				f.h.fake.ReadFn = func(_ context.Context, req providers.ReadRequest) providers.ReadResponse {
					if req.Addr == addr("pull") {
						return providers.ReadResponse{Observation: providers.Absent}
					}
					return providers.ReadResponse{Observation: providers.Present}
				}
			}
			// A run that died inside pull, after the file was written.
			f.write(t)
			st, err := state.Open(f.h.dir, state.Options{Lock: state.NewLockInfo("test")})
			if err != nil {
				t.Fatal(err)
			}
			st.Checkpoint(&state.StepRecord{Addr: addr("pull"), Phase: "p", Status: state.Running, Attempts: 1})
			st.Checkpoint(&state.StepRecord{Addr: addr("secret"), Phase: "p", Status: state.Pending})
			st.Close()
			before := f.h.fake.Applied("fake_step.secret")

			e, plan := f.plan(r)
			if err := f.run(e, plan); err != nil {
				t.Fatalf("the run refused its own change: %v", err)
			}
			if n := f.h.fake.Applied("fake_step.secret") - before; n != 1 {
				t.Errorf("secret applied %d times, want 1", n)
			}
			if n := f.h.fake.Applied("fake_step.ns"); deep && n != 1 {
				t.Errorf("ns applied %d times, want 1 (done, not run again)", n)
			}
		})
	}
}

// A step the plan took as done whose file a step before it writes anew
// in this run is planned again and applied, not passed over with the
// record of the file before.
func TestDoneStepWhoseFileAStepBeforeItRewroteRunsAgain(t *testing.T) {
	t.Parallel()
	f := newFileReader(t)
	r := pullThenSecret(false)
	e, plan := f.plan(r)
	if err := f.run(e, plan); err != nil {
		t.Fatal(err)
	}
	// pull runs again (its record says it failed), secret is done.
	st, err := state.Open(f.h.dir, state.Options{Lock: state.NewLockInfo("test")})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := st.Step(addr("pull"))
	rec.Status = state.Failed
	st.Checkpoint(rec)
	st.Close()

	f.h.events = nil
	e, plan = f.plan(r)
	if a := plan.Phases[0].Steps[2].Action; plan.Phases[0].Steps[2].Addr != addr("secret") || a != providers.NoOp {
		t.Fatalf("plan of %s: %s, want secret no-op", plan.Phases[0].Steps[2].Addr, a)
	}
	if err := f.run(e, plan); err != nil {
		t.Fatal(err)
	}
	if n := f.h.fake.Applied("fake_step.secret"); n != 2 {
		t.Errorf("secret applied %d times, want 2 (again after pull rewrote its file)", n)
	}
	planned := false
	for _, ev := range f.h.events {
		if ev.Kind == engine.StepPlanned && ev.Addr == addr("secret") && ev.ReasonCode == engine.InputsChanged {
			planned = true
		}
	}
	if !planned {
		t.Error("no StepPlanned event says why secret runs again")
	}
}

// A file no step before it writes in this run stays compared: edited
// after the plan was made, the step that reads it is refused.
func TestFileEditedAfterThePlanIsStillRefused(t *testing.T) {
	t.Parallel()
	for _, pullDone := range []bool{true, false} {
		t.Run(map[bool]string{true: "writer-done", false: "no-writer"}[pullDone], func(t *testing.T) {
			t.Parallel()
			f := newFileReader(t)
			b := newRB()
			p := b.phase("p")
			b.step(p, "pull")
			if pullDone {
				b.step(p, "secret", "pull")
				// Both ran; secret is to run again, pull stays done.
				e, plan := f.plan(b.r)
				if err := f.run(e, plan); err != nil {
					t.Fatal(err)
				}
				st, err := state.Open(f.h.dir, state.Options{Lock: state.NewLockInfo("test")})
				if err != nil {
					t.Fatal(err)
				}
				st.Checkpoint(&state.StepRecord{Addr: addr("secret"), Phase: "p", Status: state.Pending})
				st.Close()
			} else {
				b.step(p, "secret") // pull runs, but secret does not depend on it
				f.h.fake.ApplyFn = nil
				f.write(t)
			}
			before := f.h.fake.Applied("fake_step.secret")
			e, plan := f.plan(b.r)
			if a := plan.Phases[0].Steps[0].Action; pullDone && a != providers.NoOp {
				t.Fatalf("pull planned %s, want no-op", a)
			}
			f.write(t) // by hand
			err := f.run(e, plan)
			if err == nil || !strings.Contains(err.Error(), "its inputs changed since the plan was made") {
				t.Fatalf("err = %v, want the step refused", err)
			}
			if n := f.h.fake.Applied("fake_step.secret") - before; n != 0 {
				t.Errorf("secret applied %d times", n)
			}
		})
	}
}
