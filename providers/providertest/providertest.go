package providertest

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

// Harness describes the provider under test.
type Harness struct {
	// New makes a fresh, unconfigured provider.
	New func() providers.Interface
	// ProviderConfig is the evaluated provider block given to Configure;
	// a null value is used when it is cty.NilVal.
	ProviderConfig cty.Value
	// Dir is the runbook directory given to Configure.
	Dir string
	// Cases are valid step configurations, at least one per step type.
	Cases []Case
}

// Case is one step to run through the suite.
type Case struct {
	Type string
	// Config is the evaluated step configuration, an object value.
	Config cty.Value
	// Reversible says Apply returns revert data that Revert can undo, and
	// undo again (a revert interrupted before its end was recorded runs
	// again).
	Reversible bool
}

// cancelBound is how long Apply may take with a cancelled context.
const cancelBound = 5 * time.Second

// minCanary is the shortest sensitive string the suite looks for in
// output; shorter ones ("0s", "1") appear in text by chance.
const minCanary = 6

var identRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// Run runs the suite as subtests of t.
func Run(t *testing.T, h Harness) {
	t.Helper()
	t.Run("schema", func(t *testing.T) { checkSchema(t, h) })
	t.Run("configure", func(t *testing.T) { h.configured(t) })
	t.Run("unknown_type", func(t *testing.T) { checkUnknownType(t, h) })
	t.Run("concurrent_plan", func(t *testing.T) { checkConcurrentPlan(t, h) })
	for i, c := range h.Cases {
		t.Run(fmt.Sprintf("%s_%d", c.Type, i), func(t *testing.T) { checkCase(t, h, c) })
	}
}

// configured returns a new provider on which Configure succeeded.
func (h Harness) configured(t *testing.T) providers.Interface {
	t.Helper()
	p := h.New()
	if p == nil {
		t.Fatal("Harness.New returned nil")
	}
	if c, ok := p.(providers.Closer); ok {
		t.Cleanup(func() {
			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	cfg := h.ProviderConfig
	if cfg == cty.NilVal {
		cfg = cty.NullVal(cty.DynamicPseudoType)
	}
	var resp providers.ConfigureResponse
	call(t, "Configure", func() {
		resp = p.Configure(context.Background(), providers.ConfigureRequest{Name: "test", Config: cfg, Dir: h.Dir})
	})
	if err := resp.Diagnostics.Err(); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	return p
}

// call runs f and turns a panic into a fatal test failure with its stack.
func call(t *testing.T, what string, f func()) {
	t.Helper()
	if !try(t, what, f) {
		t.FailNow()
	}
}

// try is call for goroutines other than the test's: it reports a panic
// and returns false.
func try(t *testing.T, what string, f func()) (ok bool) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v\n%s", what, r, debug.Stack())
			ok = false
		}
	}()
	f()
	return true
}

func checkSchema(t *testing.T, h Harness) {
	s := h.New().Schema()
	for name, a := range s.Provider.Attributes {
		if !identRE.MatchString(name) {
			t.Errorf("provider attribute %q: not a valid name", name)
		}
		if a.Type == cty.NilType {
			t.Errorf("provider attribute %q has no type", name)
		}
	}
	if len(s.StepTypes) == 0 {
		t.Fatal("the schema has no step types")
	}
	covered := map[string]bool{}
	for _, c := range h.Cases {
		covered[c.Type] = true
	}
	for _, typ := range sortedKeys(s.StepTypes) {
		st := s.StepTypes[typ]
		if !identRE.MatchString(typ) {
			t.Errorf("step type %q: not a valid name", typ)
		}
		if st.Description == "" {
			t.Errorf("step type %q has no description", typ)
		}
		if st.CheckOnly && !st.CanCheck {
			t.Errorf("step type %q is CheckOnly but not CanCheck", typ)
		}
		if st.Attributes == nil {
			t.Errorf("step type %q has a nil attribute map", typ)
		}
		for name, a := range st.Attributes {
			if !identRE.MatchString(name) {
				t.Errorf("%s attribute %q: not a valid name", typ, name)
			}
			if a.Type == cty.NilType {
				t.Errorf("%s attribute %q has no type", typ, name)
			}
		}
		for name, ty := range st.Outputs {
			if !identRE.MatchString(name) {
				t.Errorf("%s output %q: not a valid name", typ, name)
			}
			if ty == cty.NilType {
				t.Errorf("%s output %q has no type", typ, name)
			}
		}
		if !covered[typ] {
			t.Errorf("step type %q has no case in the harness", typ)
		}
	}
	for _, c := range h.Cases {
		if _, ok := s.StepTypes[c.Type]; !ok {
			t.Errorf("harness case for %q: no such step type in the schema", c.Type)
		}
	}
}

func addr(typ string) phases.Address { return phases.Address{Type: typ, Name: "conformance"} }

func checkUnknownType(t *testing.T, h Harness) {
	p := h.configured(t)
	const typ = "no_such_type_xyz"
	null := cty.NullVal(cty.DynamicPseudoType)
	ctx := context.Background()
	call(t, "Plan of an unknown type", func() {
		if r := p.Plan(ctx, providers.PlanRequest{Type: typ, Addr: addr(typ), Config: null, Action: providers.Create}); !r.Diagnostics.HasErrors() {
			t.Error("Plan of an unknown step type gave no error diagnostic")
		}
	})
	call(t, "Apply of an unknown type", func() {
		if r := p.Apply(ctx, providers.ApplyRequest{Type: typ, Addr: addr(typ), Config: null, Log: &bytes.Buffer{}}); !r.Diagnostics.HasErrors() {
			t.Error("Apply of an unknown step type gave no error diagnostic")
		}
	})
	call(t, "Read of an unknown type", func() {
		if r := p.Read(ctx, providers.ReadRequest{Type: typ, Addr: addr(typ), Config: null}); !r.Diagnostics.HasErrors() {
			t.Error("Read of an unknown step type gave no error diagnostic")
		}
	})
	// Null configuration of a real type: errors are fine, panics are not.
	for _, typ := range sortedKeys(p.Schema().StepTypes) {
		call(t, "Plan of "+typ+" with a null config", func() {
			p.Plan(ctx, providers.PlanRequest{Type: typ, Addr: addr(typ), Config: null, Action: providers.Create})
		})
		call(t, "Read of "+typ+" with a null config", func() {
			p.Read(ctx, providers.ReadRequest{Type: typ, Addr: addr(typ), Config: null})
		})
	}
}

func checkConcurrentPlan(t *testing.T, h Harness) {
	p := h.configured(t)
	var wg sync.WaitGroup
	for range 4 {
		for _, c := range h.Cases {
			wg.Go(func() {
				try(t, "concurrent Plan", func() {
					p.Plan(context.Background(), providers.PlanRequest{Type: c.Type, Addr: addr(c.Type), Config: c.Config, Action: providers.Create})
				})
			})
		}
	}
	wg.Wait()
}

func checkCase(t *testing.T, h Harness, c Case) {
	p := h.configured(t)
	st, ok := p.Schema().StepTypes[c.Type]
	if !ok {
		t.Fatalf("no step type %q in the schema", c.Type)
	}
	checkPlans(t, p, c, st)
	applied := checkApply(t, p, c, st)
	checkApplyEdges(t, p, c)
	checkRevert(t, p, c, applied)
}

// checkPlans plans the case: as it is, with unknown optional attributes
// and with every attribute sensitive.
func checkPlans(t *testing.T, p providers.Interface, c Case, st phases.StepType) {
	ctx := context.Background()
	a := addr(c.Type)

	t.Run("plan", func(t *testing.T) {
		var r providers.PlanResponse
		call(t, "Plan", func() {
			r = p.Plan(ctx, providers.PlanRequest{Type: c.Type, Addr: a, Config: c.Config, Action: providers.Create})
		})
		if err := r.Diagnostics.Err(); err != nil {
			t.Fatalf("Plan: %v", err)
		}
		if strings.TrimSpace(r.Diff) == "" {
			t.Error("Plan gave an empty diff")
		}
	})

	t.Run("plan_unknown", func(t *testing.T) {
		cfg := withUnknownOptionals(c.Config, st)
		var r providers.PlanResponse
		call(t, "Plan with unknown optional attributes", func() {
			r = p.Plan(ctx, providers.PlanRequest{Type: c.Type, Addr: a, Config: cfg, Action: providers.Create})
		})
		if err := r.Diagnostics.Err(); err != nil {
			t.Errorf("Plan with unknown optional attributes: %v", err)
		}
		call(t, "Plan with an unknown config", func() {
			p.Plan(ctx, providers.PlanRequest{Type: c.Type, Addr: a, Config: cty.UnknownVal(c.Config.Type()), Action: providers.Create})
		})
	})

	t.Run("plan_sensitive", func(t *testing.T) {
		cfg, canaries := markAll(c.Config)
		var r providers.PlanResponse
		call(t, "Plan with sensitive attributes", func() {
			r = p.Plan(ctx, providers.PlanRequest{Type: c.Type, Addr: a, Config: cfg, Action: providers.Create})
		})
		if err := r.Diagnostics.Err(); err != nil {
			t.Errorf("Plan with sensitive attributes: %v", err)
		}
		assertNoCanary(t, "the plan diff", r.Diff, canaries)
		assertNoCanary(t, "the plan diagnostics", fmt.Sprint(r.Diagnostics), canaries)
	})
}

// checkApply applies the case and, when that succeeds, reads it after; it
// returns the apply.
func checkApply(t *testing.T, p providers.Interface, c Case, st phases.StepType) providers.ApplyResponse {
	ctx := context.Background()
	a := addr(c.Type)
	var applied providers.ApplyResponse
	ok := t.Run("apply", func(t *testing.T) {
		var log bytes.Buffer
		call(t, "Apply", func() {
			applied = p.Apply(ctx, applyRequest(c, c.Config, &log))
		})
		if err := applied.Diagnostics.Err(); err != nil {
			t.Fatalf("Apply: %v\nlog:\n%s", err, log.String())
		}
		checkOutputs(t, st, applied.Outputs)
		if c.Reversible && applied.Revert == nil {
			t.Error("Apply of a reversible case returned no Revert")
		}
	})
	if ok {
		t.Run("read_after_apply", func(t *testing.T) {
			prior := &providers.Prior{Outputs: applied.Outputs, Private: applied.Private, Revert: applied.Revert}
			var r providers.ReadResponse
			call(t, "Read", func() {
				r = p.Read(ctx, providers.ReadRequest{Type: c.Type, Addr: a, Config: c.Config, Prior: prior})
			})
			if err := r.Diagnostics.Err(); err != nil {
				t.Errorf("Read: %v", err)
			}
			if r.Observation == providers.Absent {
				t.Errorf("Read after a successful Apply says %v", r.Observation)
			}
		})
	}
	return applied
}

// checkApplyEdges applies the case with every attribute sensitive, and
// with a cancelled context.
func checkApplyEdges(t *testing.T, p providers.Interface, c Case) {
	ctx := context.Background()
	t.Run("apply_sensitive", func(t *testing.T) {
		cfg, canaries := markAll(c.Config)
		var log bytes.Buffer
		var r providers.ApplyResponse
		call(t, "Apply with sensitive attributes", func() {
			r = p.Apply(ctx, applyRequest(c, cfg, &log))
		})
		if err := r.Diagnostics.Err(); err != nil {
			t.Errorf("Apply with sensitive attributes: %v", err)
		}
		assertNoCanary(t, "the log", log.String(), canaries)
		assertNoCanary(t, "the diagnostics", fmt.Sprint(r.Diagnostics), canaries)
		if r.Revert != nil {
			assertNoCanary(t, "the revert data", r.Revert.Description+string(r.Revert.Data), canaries)
		}
		assertNoCanary(t, "the private data", string(r.Private), canaries)
		for k, v := range r.Facts {
			assertNoCanary(t, "the record", k+"="+v, canaries)
		}
	})

	t.Run("apply_cancelled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("Apply with a cancelled context panicked: %v\n%s", r, debug.Stack())
				}
			}()
			p.Apply(cctx, applyRequest(c, c.Config, &bytes.Buffer{}))
		}()
		select {
		case <-done:
		case <-time.After(cancelBound):
			t.Fatalf("Apply with a cancelled context did not return within %v", cancelBound)
		}
	})
}

// checkRevert reverts the apply of a reversible case, twice (the second
// as a resumed revert).
func checkRevert(t *testing.T, p providers.Interface, c Case, applied providers.ApplyResponse) {
	ctx := context.Background()
	a := addr(c.Type)
	if rv, isReverter := p.(providers.Reverter); isReverter && c.Reversible && applied.Revert != nil {
		t.Run("revert", func(t *testing.T) {
			var r providers.RevertResponse
			var log bytes.Buffer
			call(t, "Revert", func() {
				r = rv.Revert(ctx, providers.RevertRequest{Type: c.Type, Addr: a, Config: c.Config, Revert: *applied.Revert, Outputs: applied.Outputs, Log: &log})
			})
			if err := r.Diagnostics.Err(); err != nil {
				t.Errorf("Revert: %v\nlog:\n%s", err, log.String())
			}
			// A revert killed before its end was recorded runs again:
			// the second one must succeed on what the first left.
			log.Reset()
			call(t, "Revert", func() {
				r = rv.Revert(ctx, providers.RevertRequest{Type: c.Type, Addr: a, Config: c.Config, Revert: *applied.Revert, Outputs: applied.Outputs, Resumed: true, Log: &log})
			})
			if err := r.Diagnostics.Err(); err != nil {
				t.Errorf("Revert again (Resumed), after a revert that finished: %v\nlog:\n%s", err, log.String())
			}
		})
	}
}

func applyRequest(c Case, cfg cty.Value, log *bytes.Buffer) providers.ApplyRequest {
	return providers.ApplyRequest{
		Type:     c.Type,
		Addr:     addr(c.Type),
		Config:   cfg,
		Approval: providers.Approval{By: "providertest@localhost"},
		Log:      log,
	}
}

// checkOutputs checks that outputs are known and of the declared types.
func checkOutputs(t *testing.T, st phases.StepType, out cty.Value) {
	t.Helper()
	if len(st.Outputs) == 0 && (out == cty.NilVal || out.IsNull()) {
		return
	}
	if out == cty.NilVal || out.IsNull() {
		t.Fatalf("Apply returned no outputs; the schema declares %v", sortedKeys(st.Outputs))
	}
	out, _ = out.UnmarkDeep()
	if !out.IsWhollyKnown() {
		t.Errorf("Apply returned unknown outputs: %#v", out)
	}
	if !out.Type().IsObjectType() {
		t.Fatalf("Apply returned outputs of type %s, want an object", out.Type().FriendlyName())
	}
	for name := range out.Type().AttributeTypes() {
		if _, ok := st.Outputs[name]; !ok {
			t.Errorf("Apply returned output %q, which the schema does not declare", name)
		}
	}
	for _, name := range sortedKeys(st.Outputs) {
		want := st.Outputs[name]
		if !out.Type().HasAttribute(name) {
			t.Errorf("Apply returned no output %q", name)
			continue
		}
		got := out.GetAttr(name).Type()
		if !got.Equals(want) && !(got == cty.DynamicPseudoType && out.GetAttr(name).IsNull()) {
			t.Errorf("output %q has type %s, the schema says %s", name, got.FriendlyName(), want.FriendlyName())
		}
	}
}

// withUnknownOptionals replaces every optional attribute by an unknown
// value of its type.
func withUnknownOptionals(cfg cty.Value, st phases.StepType) cty.Value {
	attrs := map[string]cty.Value{}
	if cfg.Type().IsObjectType() && !cfg.IsNull() && cfg.IsKnown() {
		for k, v := range cfg.AsValueMap() {
			attrs[k] = v
		}
	}
	for name, a := range st.Attributes {
		if !a.Required {
			attrs[name] = cty.UnknownVal(a.Type)
		}
	}
	return cty.ObjectVal(attrs)
}

// markAll marks every leaf of cfg sensitive and returns the strings that
// must then never be shown.
func markAll(cfg cty.Value) (cty.Value, []string) {
	var canaries []string
	out, err := cty.Transform(cfg, func(_ cty.Path, v cty.Value) (cty.Value, error) {
		if v.Type().IsPrimitiveType() && !v.IsNull() && v.IsKnown() {
			if v.Type() == cty.String && len(v.AsString()) >= minCanary {
				canaries = append(canaries, v.AsString())
			}
			return v.Mark(phases.SensitiveMark), nil
		}
		return v, nil
	})
	if err != nil {
		panic(err)
	}
	return out, canaries
}

func assertNoCanary(t *testing.T, where, text string, canaries []string) {
	t.Helper()
	for _, c := range canaries {
		if strings.Contains(text, c) {
			t.Errorf("%s shows the sensitive value %q:\n%s", where, c, text)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// SameAttributes reports, as errors of t, where got differs from want:
// a missing or extra attribute, or one whose type, Required, Sensitive or
// Description differs. What names the block in the messages.
func SameAttributes(t testing.TB, what string, got, want map[string]phases.Attribute) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: attributes %v, want %v", what, got, want)
	}
	for a, w := range want {
		g, ok := got[a]
		if !ok || !g.Type.Equals(w.Type) || g.Required != w.Required || g.Sensitive != w.Sensitive || g.Description != w.Description {
			t.Errorf("%s.%s = %+v, want %+v", what, a, g, w)
		}
	}
}

// SameStepType reports, as errors of t, where got differs from want: its
// description, CanCheck, CheckOnly, attributes (SameAttributes) or
// outputs. What names the step type in the messages.
func SameStepType(t testing.TB, what string, got, want phases.StepType) {
	t.Helper()
	if got.Description != want.Description || got.CanCheck != want.CanCheck || got.CheckOnly != want.CheckOnly {
		t.Errorf("%s: %+v, want %+v", what, got, want)
	}
	SameAttributes(t, what, got.Attributes, want.Attributes)
	if len(got.Outputs) != len(want.Outputs) {
		t.Errorf("%s: outputs %v, want %v", what, got.Outputs, want.Outputs)
	}
	for o, w := range want.Outputs {
		if !got.Outputs[o].Equals(w) {
			t.Errorf("%s output %s = %#v, want %#v", what, o, got.Outputs[o], w)
		}
	}
}
