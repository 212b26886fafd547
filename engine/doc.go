// Package engine plans, runs and rolls back a runbook. It compares every
// step with its record in the state and with what its provider observes,
// walks each phase's steps as a graph (independent steps in parallel, a
// failed step skipping its dependents), checkpoints every transition, and
// reports progress only through Hooks.
//
// An output not known yet carries a mark naming the step that will produce
// it (facts.go): a plan says which step each deferred value waits
// for, and run plans such a step again once that step has run.
//
// A provider whose block uses step outputs is configured at its first use
// (Engine.use, facts.go), once, with the outputs known then; until they are,
// its steps plan as deferred, naming the steps the provider waits for.
//
// A provider that runs as a program (providers.ProgramRunner) has that
// program named in the plan, checked even when the provider is configured
// later (programs.go); a saved plan is refused by a run that would start
// other programs.
//
// A saved plan is a contract (contract.go): each step's entry digests its
// attributes as written and the files its provider reads, and a run of
// the plan refuses, before anything runs, a runbook that differs, naming
// every difference. Input hashes are keyed (inputhash.go): a copy of the
// state or of a plan does not let a weak secret be guessed offline.
//
// The event log the hooks write (hook.go, logText) is read back by
// ReadLog (logread.go): sessions and step attempts, for the report.
//
// The engine knows providers only through providers.Interface, the state
// only through state.Manager and the runbook only as phases values: it
// never imports a concrete provider, HCL, or a view (tests/deps
// keeps it so).
package engine
