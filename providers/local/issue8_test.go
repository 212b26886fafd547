package local_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/local"
)

// TestExecRevertCreates: revert_creates is the revert's own observation.
// A revert resumed after an interruption is skipped when its path exists;
// a first revert, or a resumed one whose path is missing, runs.
func TestExecRevertCreates(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	p := configured(t, local.New(), root)
	cfg := obj(map[string]cty.Value{
		"command":        strs("true"),
		"revert":         strs("sh", "-c", "echo ran >> runs; touch undone"),
		"revert_creates": cty.StringVal("undone"),
	})
	r := mustApply(t, p, "exec", cfg, io.Discard)
	if r.Revert == nil {
		t.Fatal("no revert data")
	}
	revert := func(resumed bool) string {
		t.Helper()
		var log bytes.Buffer
		rr := p.Revert(context.Background(), providers.RevertRequest{Type: "exec", Addr: phases.Address{Type: "exec", Name: "x"}, Config: cfg, Revert: *r.Revert, Resumed: resumed, Log: &log})
		if err := rr.Diagnostics.Err(); err != nil {
			t.Fatalf("Revert: %v\n%s", err, log.String())
		}
		return log.String()
	}
	runs := func() int {
		b, _ := os.ReadFile(filepath.Join(root, "runs"))
		return strings.Count(string(b), "ran")
	}
	revert(true) // resumed, but nothing made yet: it runs
	if runs() != 1 {
		t.Fatalf("a resumed revert whose revert_creates is missing did not run (%d runs)", runs())
	}
	if log := revert(true); runs() != 1 || !strings.Contains(log, "revert skipped, undone exists") {
		t.Errorf("a resumed revert whose revert_creates exists ran again (%d runs, log %q)", runs(), log)
	}
	revert(false) // a new rollback: the marker may be stale, the revert runs
	if runs() != 2 {
		t.Errorf("a first revert was skipped because of revert_creates (%d runs)", runs())
	}

	// revert_creates without revert is a mistake.
	pr := plan(p, "exec", obj(map[string]cty.Value{"command": strs("true"), "revert_creates": cty.StringVal("x")}))
	wantErr(t, pr.Diagnostics, "revert_creates", "no \"revert\"")
}

// TestExecEnvironmentWithoutSecrets: a command inherits migrate's
// environment without MIGRATE_VAR_* and MIGRATE_AGE_IDENTITY; a value it
// needs comes through its env. (Not parallel: it sets the environment.)
func TestExecEnvironmentWithoutSecrets(t *testing.T) {
	t.Setenv("MIGRATE_VAR_tok", "s3cret")
	t.Setenv("MIGRATE_AGE_IDENTITY", "AGE-SECRET-KEY-1X")
	t.Setenv("PLAIN_CANARY", "plain")
	p := configured(t, local.New(), t.TempDir())
	for _, env := range []cty.Value{cty.NullVal(cty.Map(cty.String)), cty.MapVal(map[string]cty.Value{"TOK": cty.StringVal("given")})} {
		var log bytes.Buffer
		mustApply(t, p, "exec", obj(map[string]cty.Value{"command": strs("env"), "env": env}), &log)
		out := log.String()
		if strings.Contains(out, "s3cret") || strings.Contains(out, "AGE-SECRET-KEY") {
			t.Errorf("a step inherited migrate's secrets:\n%s", out)
		}
		if !strings.Contains(out, "PLAIN_CANARY=plain") {
			t.Errorf("a step lost the rest of the environment:\n%s", out)
		}
		if !env.IsNull() && !strings.Contains(out, "TOK=given") {
			t.Errorf("a step did not get its env:\n%s", out)
		}
	}
}

// TestExecPlanSaysIrreversible: an exec step without revert says so in
// its plan; one with revert does not.
func TestExecPlanSaysIrreversible(t *testing.T) {
	t.Parallel()
	p := configured(t, local.New(), t.TempDir())
	if r := plan(p, "exec", obj(map[string]cty.Value{"command": strs("true")})); r.Irreversible != "no revert command" {
		t.Errorf("without revert: Irreversible = %q", r.Irreversible)
	}
	if r := plan(p, "exec", obj(map[string]cty.Value{"command": strs("true"), "revert": strs("true")})); r.Irreversible != "" {
		t.Errorf("with revert: Irreversible = %q", r.Irreversible)
	}
	for _, typ := range []string{"wait"} {
		if r := plan(p, typ, obj(map[string]cty.Value{"duration": cty.StringVal("0s")})); r.Irreversible != "" {
			t.Errorf("%s has nothing to undo, yet says %q", typ, r.Irreversible)
		}
	}
}
