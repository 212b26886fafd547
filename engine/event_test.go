package engine_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

// TestEveryEventKindDocumented: EventKinds, which the reference lists,
// has every kind declared in event.go once, in their order, and names
// only fields that EventFields describes; EventFields describes every
// field of an event's JSON.
func TestEveryEventKindDocumented(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "event.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []engine.EventKind
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, sp := range g.Specs {
			v := sp.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "EventKind" {
				continue
			}
			s, err := strconv.Unquote(v.Values[0].(*ast.BasicLit).Value)
			if err != nil {
				t.Fatal(err)
			}
			declared = append(declared, engine.EventKind(s))
		}
	}
	var documented []engine.EventKind
	for _, k := range engine.EventKinds {
		documented = append(documented, k.Kind)
	}
	if !slices.Equal(declared, documented) {
		t.Errorf("EventKinds documents %v, event.go declares %v", documented, declared)
	}

	var tags []string
	ty := reflect.TypeFor[engine.Event]()
	for i := range ty.NumField() {
		if name, _, _ := strings.Cut(ty.Field(i).Tag.Get("json"), ","); name != "-" {
			tags = append(tags, name)
		}
	}
	var fields []string
	for _, f := range engine.EventFields {
		fields = append(fields, f.Name)
	}
	if !slices.Equal(tags, fields) {
		t.Errorf("EventFields describes %v, an event's JSON has %v", fields, tags)
	}
	for _, k := range engine.EventKinds {
		if k.Says == "" {
			t.Errorf("%s says nothing", k.Kind)
		}
		for _, f := range k.Fields {
			if !slices.Contains(fields, f) || f == "kind" || f == "time" {
				t.Errorf("%s lists field %q, not one of %v besides kind and time", k.Kind, f, fields)
			}
		}
	}
}

// TestEventKindsOfRunAndRollback: a phase up to date, the phases of a
// rollback and a step that could not be undone are told apart by their
// kind alone, with no message to read.
func TestEventKindsOfRunAndRollback(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := newRB()
	a := b.phase("A")
	b.step(a, "a")
	p := b.phase("B")
	b.step(p, "b")
	kinds := func(from int) []string {
		h.mu.Lock()
		defer h.mu.Unlock()
		var out []string
		for _, ev := range h.events[from:] {
			if ev.Kind == engine.StepOutput {
				continue
			}
			if ev.Kind == engine.PhaseUpToDate || ev.Kind == engine.PhaseRollbackStarted || ev.Kind == engine.PhaseRolledBack || ev.Kind == engine.StepRevertFailed {
				if ev.Message != "" {
					t.Errorf("%s carries the message %q: its kind says it all", ev.Kind, ev.Message)
				}
			}
			s := string(ev.Kind) + " " + ev.Phase
			if !ev.Addr.IsZero() {
				s = string(ev.Kind) + " " + ev.Addr.Name
			}
			out = append(out, s)
		}
		return out
	}
	want := func(what string, got []string, want ...string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: events\n  %s\nwant\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	}
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	n := len(h.events)
	if err := h.run(b.r); err != nil {
		t.Fatal(err)
	}
	want("a run again", kinds(n), "phase_up_to_date A", "phase_up_to_date B")

	h.fake.RevertFn = func(_ context.Context, req providers.RevertRequest) providers.RevertResponse {
		return providers.RevertResponse{Diagnostics: phases.Errorf("Revert Failed", "%s did not revert.", req.Addr)}
	}
	n = len(h.events)
	if _, err := h.rollback(b.r); err == nil {
		t.Fatal("a rollback whose revert fails succeeded")
	}
	want("a rollback that fails", kinds(n), "phase_rollback_started B", "step_reverting b", "step_revert_failed b", "phase_failed B")

	h.fake.RevertFn = nil
	n = len(h.events)
	if _, err := h.rollback(b.r); err != nil {
		t.Fatal(err)
	}
	want("the rollback again", kinds(n),
		"phase_rollback_started B", "step_reverting b", "step_reverted b", "phase_rolled_back B",
		"phase_rollback_started A", "step_reverting a", "step_reverted a", "phase_rolled_back A")
}
