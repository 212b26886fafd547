package local_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/local"
)

// TestSensitiveArgvRedactedBeforeQuoting: a sensitive argument with a
// quote in it is redacted before the argv is shell-quoted (quoted, it is
// text the scrubber does not know), while the command still gets it.
func TestSensitiveArgvRedactedBeforeQuoting(t *testing.T) {
	t.Parallel()
	const pw = "P@ss'w0rd"
	p := configured(t, local.New(), t.TempDir())
	cfg := obj(map[string]cty.Value{
		"command": cty.ListVal([]cty.Value{cty.StringVal("printf"), cty.StringVal("%s"), cty.StringVal(pw).Mark(phases.SensitiveMark)}),
		"revert":  cty.ListVal([]cty.Value{cty.StringVal("echo"), cty.StringVal(pw).Mark(phases.SensitiveMark)}),
	})
	r := plan(p, local.Exec, cfg)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatal(err)
	}
	want := "run: printf %s " + phases.Redacted + "\nrevert: echo " + phases.Redacted
	if r.Diff != want {
		t.Errorf("the plan shows\n%s\nwant\n%s", r.Diff, want)
	}
	var log bytes.Buffer
	a := mustApply(t, p, local.Exec, cfg, &log)
	if a.Revert == nil || strings.Contains(a.Revert.Description, "w0rd") || strings.Contains(string(a.Revert.Data), "w0rd") {
		t.Errorf("the revert data shows the secret: %+v", a.Revert)
	}
	// The command got the real value: printf printed it, and the log
	// scrubbed it.
	if got := log.String(); !strings.Contains(got, phases.Redacted) || strings.Contains(got, "w0rd") {
		t.Errorf("log = %q, want the printed secret redacted", got)
	}
}

// TestSensitiveArgvWarnsToUseEnv: a sensitive value in command or revert
// draws a warning at plan that points to env; one in env draws none.
func TestSensitiveArgvWarnsToUseEnv(t *testing.T) {
	t.Parallel()
	p := configured(t, local.New(), t.TempDir())
	sens := cty.StringVal("hunter2-secret").Mark(phases.SensitiveMark)
	warned := func(cfg cty.Value) []string {
		t.Helper()
		r := plan(p, local.Exec, cfg)
		if r.Diagnostics.HasErrors() {
			t.Fatal(r.Diagnostics.Err())
		}
		var out []string
		for _, d := range r.Diagnostics {
			if d.Severity == phases.Warning && d.Summary == "Sensitive Value In Command Arguments" {
				out = append(out, d.Detail)
			}
		}
		return out
	}
	got := warned(obj(map[string]cty.Value{
		"command": cty.ListVal([]cty.Value{cty.StringVal("curl"), cty.StringVal("-u"), sens}),
		"revert":  cty.ListVal([]cty.Value{cty.StringVal("true"), sens, sens}),
	}))
	if len(got) != 2 {
		t.Fatalf("warnings = %q, want one for command and one for revert", got)
	}
	for i, want := range []string{`Element 2 of the "command" attribute of exec.x`, `Elements 1 and 2 of the "revert" attribute of exec.x`} {
		if !strings.Contains(got[i], want) || !strings.Contains(got[i], "pass it through env") || strings.Contains(got[i], "hunter2") {
			t.Errorf("warning %d = %q, want it to name %s and point to env, without the value", i, got[i], want)
		}
	}
	if got := warned(obj(map[string]cty.Value{
		"command": cty.ListVal([]cty.Value{cty.StringVal("sh"), cty.StringVal("-c"), cty.StringVal(`curl -u "$T"`)}),
		"env":     cty.MapVal(map[string]cty.Value{"T": sens}),
	})); len(got) != 0 {
		t.Errorf("a secret in env drew %q", got)
	}
}
