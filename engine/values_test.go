package engine_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
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
