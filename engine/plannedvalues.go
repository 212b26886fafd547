package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

// A step whose inputs wait for steps of the run (KnownAfter) or whose
// provider could not plan it yet (Deferred) is planned again at its turn.
// With a saved plan, what was reviewed of it must still hold then: the
// plan keeps, for each such step, its planned values (PlannedValues), a
// keyed digest per attribute path of its inputs ("inputs.command[1]") and
// of the outputs its provider planned ("outputs.port"). A value not known
// at plan is kept as "unknown" and matches anything. Planned again at
// run, a known value whose digest differs refuses the step before it is
// applied, naming the path, never the value.
//
// A digest is an HMAC under the input key (keyed), over the path and the
// value: the same secret at two paths does not give the same digest.
// Without an input key a digest is a plain SHA-256, which would let a
// weak secret be guessed offline from the plan file: a sensitive value is
// then kept as "sensitive" and, like "unknown", matches anything.

// PlannedValues maps an attribute path to the digest of its planned
// value, or to unknownValue or sensitiveValue.
type PlannedValues map[string]string

const (
	unknownValue   = "unknown"
	sensitiveValue = "sensitive"
)

// plannedAgain reports whether run plans sp again before applying it.
func plannedAgain(sp *StepPlan) bool {
	return len(sp.KnownAfter) > 0 || sp.Deferred
}

// keepPlannedValues records in sp, when run will plan it again, the
// planned values of s: its inputs as planStep evaluated them (cfg;
// evaluated here when decide did not need them, unknown when they do not
// evaluate), and the outputs the plan gives the steps after it (out).
func (e *Engine) keepPlannedValues(sp *StepPlan, s *phases.Step, cfg cty.Value, out *outputs) {
	if !plannedAgain(sp) {
		return
	}
	if cfg == cty.NilVal {
		var diags phases.Diagnostics
		if cfg, _, diags = out.evaluateAfter(s); diags.HasErrors() {
			cfg = cty.DynamicVal
		}
	}
	out.mu.RLock()
	planned := out.m[s.Addr] // cty.NilVal when it has none
	out.mu.RUnlock()
	sp.PlannedValues = e.plannedValues(cfg, planned)
}

// plannedValues digests a step's inputs and its planned outputs, path by
// path.
func (e *Engine) plannedValues(inputs, outputs cty.Value) PlannedValues {
	pv := PlannedValues{}
	e.digestPaths(pv, "inputs", inputs)
	if outputs == cty.NilVal || outputs.IsKnown() && outputs.IsNull() {
		// The provider's plan says nothing of them.
		outputs = cty.DynamicVal
	}
	e.digestPaths(pv, "outputs", outputs)
	return pv
}

// digestPaths adds v's digests to pv under path: one per known value that
// has no parts (a string, a number, a null, an empty collection), one for
// a set or a sensitive value as a whole, unknownValue for what is not
// known.
func (e *Engine) digestPaths(pv PlannedValues, path string, v cty.Value) {
	plain, marks := v.Unmark()
	_, sensitive := marks[phases.SensitiveMark]
	ty := plain.Type()
	switch {
	case !plain.IsKnown():
		pv[path] = unknownValue
	case sensitive || plain.IsNull() || !(ty.IsObjectType() || ty.IsMapType() || ty.IsListType() || ty.IsTupleType()) || plain.LengthInt() == 0:
		pv[path] = e.valueDigest(path, v)
	default:
		for it := plain.ElementIterator(); it.Next(); {
			k, x := it.Element()
			switch {
			case ty.IsObjectType():
				e.digestPaths(pv, path+"."+k.AsString(), x)
			case ty.IsMapType():
				e.digestPaths(pv, path+fmt.Sprintf("[%q]", e.hooks.redactor.Text(k.AsString())), x)
			default:
				e.digestPaths(pv, path+"["+k.AsBigFloat().Text('f', 0)+"]", x)
			}
		}
	}
}

// valueDigest is the keyed digest of v at path, sensitiveValue when v is
// or holds a secret and there is no input key to digest it under.
func (e *Engine) valueDigest(path string, v cty.Value) string {
	b, ok := attrBytes(v, false)
	if !ok {
		return unknownValue // a set with an unknown element
	}
	plain, pvms := v.UnmarkDeepWithPaths()
	secret := slices.ContainsFunc(pvms, func(p cty.PathValueMarks) bool {
		_, ok := p.Marks[phases.SensitiveMark]
		return ok
	})
	// A value the scrubber knows for a secret is one, marked or not.
	_ = cty.Walk(plain, func(_ cty.Path, x cty.Value) (bool, error) {
		if x.IsKnown() && !x.IsNull() && x.Type() == cty.String && e.hooks.redactor.Text(x.AsString()) != x.AsString() {
			secret = true
		}
		return !secret, nil
	})
	if secret && len(e.inputKey) == 0 {
		return sensitiveValue
	}
	return e.keyed(path + "\x00" + string(b))
}

// checkPlannedValues compares a step planned again at run (its inputs
// now, the outputs its fresh plan gives) with the values a saved plan
// kept of it, and says every path that no longer holds.
func (e *Engine) checkPlannedValues(a phases.Address, saved PlannedValues, inputs, outputs cty.Value) error {
	if saved == nil {
		return &StalePlanError{Steps: []phases.Address{a}, Differences: []string{"the plan keeps no planned values for it (it was made by an older migrate)"}}
	}
	now := e.plannedValues(inputs, outputs)
	var diffs []string
	for path, d := range saved {
		if d == unknownValue || d == sensitiveValue {
			continue
		}
		n, ok := now[path]
		if !ok {
			n, _ = related(path, now) // now whole where the plan had parts
		}
		switch n {
		case d, sensitiveValue:
		case unknownValue:
			diffs = append(diffs, path+": not known now, as it was in the plan")
		default:
			diffs = append(diffs, path+": its value differs from the plan's")
		}
	}
	for path := range now {
		if _, ok := saved[path]; ok {
			continue
		}
		if above, parts := related(path, saved); above == "" && !parts {
			diffs = append(diffs, path+": not in the plan")
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	slices.Sort(diffs)
	return &StalePlanError{Steps: []phases.Address{a}, Differences: diffs}
}

// related is the digest pv holds for a path above path (the value path is
// part of), "" when none; parts says whether pv holds paths below it.
func related(path string, pv PlannedValues) (above string, parts bool) {
	below := func(p, q string) bool { // p is a part of q
		rest, ok := strings.CutPrefix(p, q)
		return ok && rest != "" && (rest[0] == '.' || rest[0] == '[')
	}
	for p, d := range pv {
		switch {
		case below(path, p):
			above = d
		case below(p, path):
			parts = true
		}
	}
	return above, parts
}

// StalePlanError refuses a saved plan whose steps that run plans again
// no longer hold what was reviewed of them: planned again at run, a step
// (Steps[0]) has other planned values (Differences: the attribute paths
// that differ and how, never their values); or the plan, made by an
// older migrate, keeps none for Steps (Differences empty), so nothing
// can be compared.
type StalePlanError struct {
	Steps       []phases.Address
	Differences []string
}

func (e *StalePlanError) Error() string {
	if len(e.Differences) == 0 {
		return fmt.Sprintf("the plan was made by an older migrate: it keeps no planned values for %s, which run plans again once %s known, so what was reviewed cannot be compared with what would run; nothing was run: make a new plan (migrate plan --out FILE) and review it",
			joinAddrs(e.Steps), plural(len(e.Steps), "its inputs are", "their inputs are"))
	}
	return fmt.Sprintf("the saved plan is stale for %s: planned again now that its inputs are known, it no longer has the values the plan was reviewed with:\n  - %s\nNothing was applied for %s: make a new plan",
		e.Steps[0], strings.Join(e.Differences, "\n  - "), e.Steps[0])
}

// oldPlan refuses a saved plan that keeps no planned values for a step
// run would plan again.
func oldPlan(plan *Plan) error {
	var steps []phases.Address
	for _, pp := range plan.Phases {
		for _, sp := range pp.Steps {
			if sp.Action != providers.NoOp && plannedAgain(sp) && sp.PlannedValues == nil {
				steps = append(steps, sp.Addr)
			}
		}
	}
	if len(steps) > 0 {
		return &StalePlanError{Steps: steps}
	}
	return nil
}
