package engine_test

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// hostile is what a guest or a command may print to take over the
// terminal: a new window title, a cleared screen, the cursor moved up, an
// 8-bit CSI, and a BEL.
const hostile = "\x1b]0;pwned\x07\x1b[2J\x1b[1A\u009b31m\a"

// TestStepOutputIsBoundedAndShownAsText: a step printing a megabyte with
// no newline, and terminal escapes, reaches the events and the log as
// lines of at most 64 KiB, a secret across a cut still redacted, and the
// escapes as visible text.
func TestStepOutputIsBoundedAndShownAsText(t *testing.T) {
	t.Parallel()
	const canary = "CANARY-output-4d2a"
	h := newHarness(t)
	lg, err := state.OpenLog(h.dir, "run")
	if err != nil {
		t.Fatal(err)
	}
	h.log = lg
	b := newRB()
	b.r.Secrets = []string{canary}
	b.step(b.phase("p"), "loud")
	h.fake.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		io.WriteString(req.Log, "title "+hostile+" done\n")
		chunk := strings.Repeat("a", 4096)
		for range 64<<10/4096 - 1 {
			io.WriteString(req.Log, chunk)
		}
		io.WriteString(req.Log, chunk[:4096-7]+canary) // across the first cut
		for range 200 {
			io.WriteString(req.Log, chunk)
		}
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Failed", "last output: %s", hostile)}
	}
	if err := h.run(b.r); err == nil {
		t.Fatal("want failure")
	}
	lg.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	lines := 0
	for _, ev := range h.events {
		text := ev.Message + ev.Error
		if strings.ContainsAny(text, "\x1b\x07\u009b") || strings.Contains(text, canary) || strings.Contains(text, "CANARY") {
			t.Errorf("%s event carries raw escapes or the secret: %.200q", ev.Kind, text)
		}
		if ev.Kind == engine.StepOutput {
			lines++
			if len(ev.Message) > 64<<10 {
				t.Errorf("an output line of %d bytes", len(ev.Message))
			}
		}
	}
	if lines < 800<<10/(64<<10) {
		t.Errorf("%d output lines; want the megabyte cut into lines of 64 KiB", lines)
	}
	log, _ := os.ReadFile(lg.Path())
	if strings.ContainsAny(string(log), "\x1b\x07\u009b") || !strings.Contains(string(log), `\x1b]0;pwned\a`) {
		t.Errorf("the log holds raw escapes, or not their visible form")
	}
}
