package phases

import (
	"slices"
	"time"

	"github.com/zclconf/go-cty/cty"
)

// Runbook is a whole migration: its providers and its phases in the order
// they run.
type Runbook struct {
	// Dir is the directory the runbook was loaded from; relative paths in
	// step attributes are resolved against it.
	Dir string
	// Backend is the backend block; nil means the local default.
	Backend   *BackendConfig
	Providers []*ProviderConfig
	Phases    []*Phase
	// Roles are the role blocks, by name: what the runbook's steps,
	// variables and phases stand for, for programs that read it.
	Roles map[string]*Role
	// Services are the service blocks, in the order written: each a
	// window of downtime the engine measures.
	Services []*Service
	// Moved are the moved blocks, in the order written: a chain a -> b,
	// b -> c carries a's record to c.
	Moved []*Moved
	// Removed are the removed blocks: what becomes of the records of
	// steps the runbook no longer has.
	Removed []*Removed
	// Secrets holds the plain values of sensitive variables, so that the
	// engine can redact them wherever they surface inside other text (a
	// command echoing a token). Memory only: never written anywhere.
	Secrets []string
}

// Phase is one stage of a migration (platform, data-apps, ...).
type Phase struct {
	Name        string
	Description string
	// After names the phases that must be complete before this one runs.
	// The loader fills it with the previous phase when the runbook does not
	// say otherwise, so the engine never has to guess the order.
	After  []string
	Steps  []*Step
	Checks []*Step
	// ForEach holds, for each step block with for_each, the step as
	// declared (its address without a key): what an instance whose key
	// left the map is reverted with. A step of a group called with
	// for_each is here too, addressed without the call's key
	// (group.CALL.TYPE.NAME): what the steps of a removed instance are
	// reverted with.
	ForEach []*Step
	Range   Range
}

// ProviderConfig is one provider block: provider "TYPE" "NAME" { ... }.
type ProviderConfig struct {
	Type   string
	Name   string
	Config Evaluator
	Range  Range
	// DependsOn lists the steps whose outputs the block uses, sorted.
	// The provider is configured only once they have run, so every step
	// it runs depends on them too (the loader adds them to Step.DependsOn).
	DependsOn []Address
}

// Key is how steps refer to the provider: TYPE.NAME.
func (p *ProviderConfig) Key() string { return p.Type + "." + p.Name }

// CheckWhen says when a check gates its phase.
type CheckWhen string

const (
	// CheckBefore checks must pass before any step of the phase starts.
	CheckBefore CheckWhen = "before"
	// CheckAfter checks must pass before the phase counts as complete.
	CheckAfter CheckWhen = "after"
)

// Step is one unit of work (or, with When set, a check) run by a provider.
type Step struct {
	Addr  Address
	Phase string
	// Provider is the key (TYPE.NAME) of the provider instance that runs
	// this step.
	Provider string
	// DependsOn holds explicit depends_on entries and every step the
	// step's attributes refer to, deduplicated and sorted.
	DependsOn []Address
	// Discards lists the steps whose effects this step destroys with its
	// own (what was made inside a VM it deletes): once it is done, a
	// rollback has nothing to undo for them. They run before it.
	Discards []Address
	Timeout  time.Duration
	Retry    RetryPolicy
	// When is set only for checks.
	When   CheckWhen
	Config Evaluator
	Range  Range
}

// IsCheck reports whether the step is a phase gate rather than a change.
func (s *Step) IsCheck() bool { return s.When != "" }

// WaitsFor is what the after check c of p runs after: its dependencies
// among the phase's steps, when it names any (it then runs as soon as
// they are done, in the phase's walk: a service's serving check answers
// when its own release is up, not when the slowest of the phase's steps
// ends); nil: after all of them.
func (p *Phase) WaitsFor(c *Step) []Address {
	if c.When != CheckAfter {
		return nil
	}
	var out []Address
	for _, d := range c.DependsOn {
		if slices.ContainsFunc(p.Steps, func(s *Step) bool { return s.Addr == d }) {
			out = append(out, d)
		}
	}
	return out
}

// RetryPolicy is how often a failed step is tried again, and how long to
// wait between tries (doubling each time).
type RetryPolicy struct {
	Attempts int
	Backoff  time.Duration
}

// Evaluator turns attributes into a value. outputs maps every step address
// the runbook knows to that step's outputs (an object), or to an unknown
// value when it has not run yet; an Evaluator must accept unknowns, so that
// a plan can be made before anything ran.
type Evaluator interface {
	Evaluate(outputs map[Address]cty.Value) (cty.Value, Diagnostics)
}

// EvaluatorFunc adapts a function to Evaluator.
type EvaluatorFunc func(outputs map[Address]cty.Value) (cty.Value, Diagnostics)

// Evaluate calls f.
func (f EvaluatorFunc) Evaluate(outputs map[Address]cty.Value) (cty.Value, Diagnostics) {
	return f(outputs)
}

// Static is an Evaluator that always yields v.
func Static(v cty.Value) Evaluator {
	return EvaluatorFunc(func(map[Address]cty.Value) (cty.Value, Diagnostics) { return v, nil })
}

// AllSteps lists the steps and checks of every phase in declaration order.
func (r *Runbook) AllSteps() []*Step {
	var out []*Step
	for _, p := range r.Phases {
		out = append(out, p.Checks...)
		out = append(out, p.Steps...)
	}
	return out
}

// Phase finds a phase by name.
func (r *Runbook) Phase(name string) *Phase {
	name = Name(name)
	for _, p := range r.Phases {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Moved is a moved block: the record of the step at From belongs to the
// step at To now (a step renamed). The engine carries it over before
// anything runs; a From without a record is nothing to do.
type Moved struct {
	From, To Address
	Range    Range // the block
}

// Removed is a removed block: the records of a step the runbook no
// longer has (From), or of every step of a group call it no longer has
// (Call: only From's Group and GroupKey count), and whether a run undoes
// them (Revert, as it does with no block) or lets them go, leaving what
// their steps did as it is.
type Removed struct {
	From   Address
	Call   bool
	Revert bool
	Range  Range // the block
}

// Matches says whether the block is about the record of a. A step's
// address without a key is about every instance of it too (a for_each
// step deleted whole), as in Terraform.
func (r *Removed) Matches(a Address) bool {
	switch {
	case !r.Call && r.From.Key == "":
		return a.Base() == r.From
	case !r.Call:
		return a == r.From
	}
	return a.Group == r.From.Group && (r.From.GroupKey == "" || a.GroupKey == r.From.GroupKey)
}

// Target is what the block names, as written: a step's address, or a
// group call's (group.NAME, group.NAME["KEY"]).
func (r *Removed) Target() string {
	if r.Call {
		return r.From.GroupPrefix()
	}
	return r.From.String()
}
