package engine_test

import (
	"context"
	"testing"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// TestDoneStepUnreadableForNowStaysDone is the rule providers/talos
// relies on for a done machine config whose node reboots because an
// upgrade after it was stopped in flight: a read that says Unknown with a
// warning only is no plan error and keeps the done step done (not run
// again), and the step after it, in flight, is observed then.
func TestDoneStepUnreadableForNowStaysDone(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	p := b.phase("p")
	b.step(p, "config")
	b.step(p, "upgrade", "config")
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	// A later run was stopped while it applied upgrade again.
	rec := h.record(addr("upgrade"))
	rec.Status = state.Running
	st, err := state.Open(h.dir, state.Options{Lock: state.NewLockInfo("test")})
	if err != nil {
		t.Fatal(err)
	}
	st.Checkpoint(rec)
	st.Close()

	inFlight := false
	h.fake.ReadFn = func(_ context.Context, req providers.ReadRequest) providers.ReadResponse {
		if req.Addr == addr("config") {
			return providers.ReadResponse{Observation: providers.Unknown, Diagnostics: phases.Diagnostics{{Severity: phases.Warning, Summary: "Node Not Answering", Detail: "the node does not answer now"}}}
		}
		inFlight = inFlight || req.InFlight
		return providers.ReadResponse{Observation: providers.Present, Revert: &providers.RevertData{Description: "undo upgrade"}}
	}
	if err := h.run(b.r); err != nil {
		t.Fatalf("a done step unreadable for now failed the run: %v", err)
	}
	if n := h.fake.Applied("fake_step.config"); n != 1 {
		t.Errorf("config applied %d times, want 1 (done, unreadable for now)", n)
	}
	if n := h.fake.Applied("fake_step.upgrade"); n != 1 {
		t.Errorf("upgrade applied %d times, want 1 (observed present)", n)
	}
	if !inFlight {
		t.Error("upgrade was not read in flight")
	}
	for _, s := range []string{"config", "upgrade"} {
		if h.status(s) != state.Done {
			t.Errorf("%s: %s", s, h.status(s))
		}
	}
}
