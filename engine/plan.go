package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// PlanFormatVersion is the version of saved plan files. Version 2 added
// each step's Contract; a plan without one cannot be held to it.
const PlanFormatVersion = 2

// Plan is what a run would do, per phase and step. It pins the state's
// lineage and serial: a run refuses a plan made against another state.
type Plan struct {
	FormatVersion int          `json:"format_version"`
	Lineage       string       `json:"lineage"`
	Serial        uint64       `json:"serial"`
	Phases        []*PhasePlan `json:"phases"`
	// Programs are the provider programs the run would start, checked.
	Programs []providers.Program `json:"programs,omitempty"`
	// Moved are the records the runbook's moved blocks carry to their
	// steps' new addresses: run makes them first (moved.go).
	Moved []Move `json:"moved,omitempty"`
	// LetGo are the records the runbook's removed blocks with revert =
	// false let go: run writes that first, after the moves (forget.go).
	LetGo []Forget `json:"let_go,omitempty"`
	// Services are the windows of downtime the plan's phases open, as
	// the plan expects them (estimate.go).
	Services []ServicePlan `json:"services,omitempty"`
}

// PhasePlan is the plan of one phase.
type PhasePlan struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Complete: every step is done and every after-check passed.
	Complete bool        `json:"complete"`
	Steps    []*StepPlan `json:"steps"`
}

// Irreversible lists the steps that will run and that a rollback will
// not be able to undo, with why: said before anything runs.
func (pp *PhasePlan) Irreversible() []IrreversibleStep {
	var out []IrreversibleStep
	for _, sp := range pp.Steps {
		if sp.Action != providers.NoOp && sp.Irreversible != "" {
			out = append(out, IrreversibleStep{Addr: sp.Addr, Reason: sp.Irreversible})
		}
	}
	return out
}

// MarshalJSON adds the phase's Irreversible list, for plan --json (a
// saved plan's is not read back: it is derived).
func (pp PhasePlan) MarshalJSON() ([]byte, error) {
	type plain PhasePlan
	return json.Marshal(struct {
		plain
		Irreversible []IrreversibleStep `json:"irreversible,omitempty"`
	}{plain(pp), pp.Irreversible()})
}

// IrreversibleStep is a step a rollback will not undo, and why.
type IrreversibleStep struct {
	Addr   phases.Address `json:"address"`
	Reason string         `json:"reason"`
}

// StepPlan is the plan of one step or check.
type StepPlan struct {
	Addr phases.Address `json:"address"`
	// Group is the group call instance of a step of a group
	// (group.CALL, group.CALL["KEY"]: Addr.GroupPrefix()), for consumers
	// that gather its steps.
	Group string           `json:"group,omitempty"`
	When  phases.CheckWhen `json:"when,omitempty"`
	// WaitsFor, of an after check that depends on steps of its phase:
	// those steps; it runs as soon as they are done (Phase.WaitsFor).
	WaitsFor []phases.Address `json:"waits_for,omitempty"`
	// Action is what a run will do; checks that will run say Create. In
	// JSON it is its name ("action": "create").
	Action providers.Action `json:"action"`
	Status state.Status     `json:"status,omitempty"`
	// Diff is the provider's account of the change, redacted.
	Diff string `json:"diff,omitempty"`
	// ReasonCode says why the action (decide.go); Why holds what it
	// names. Views say it in words.
	ReasonCode ReasonCode `json:"reason_code,omitempty"`
	Why        Why        `json:"why,omitzero"`
	// Irreversible, when the step will run, says why a rollback will not
	// be able to undo it (from the provider, redacted).
	Irreversible string `json:"irreversible,omitempty"`
	// KnownAfter lists the steps whose outputs the step's inputs wait
	// for: steps of this run that have not run yet. Its diff shows such a
	// value as "(known after exec.first)", and run plans the step again
	// once they have run.
	KnownAfter []phases.Address `json:"known_after,omitempty"`
	// Deferred: the provider could not plan the step before its inputs are
	// known; the whole diff waits for the steps of KnownAfter.
	Deferred bool `json:"deferred,omitempty"`
	// Recheck: the step is done and its provider finds it so, but steps it
	// depends on change in this run first (they may make what it acts
	// on: the VM a delete deletes). Run reads it again once they are
	// done, and runs it if it is no longer done.
	Recheck []phases.Address `json:"recheck,omitempty"`
	// InputHash is the hash of the inputs the plan was made with, empty
	// when they depend on steps that have not run yet.
	InputHash string `json:"input_hash,omitempty"`
	// Contract digests the step's inputs as written: run --plan refuses
	// the plan when the runbook's differ (contract.go).
	Contract Contract        `json:"contract"`
	Planned  json.RawMessage `json:"planned,omitempty"`
	// CopyBytes is what the step expects to copy
	// (providers.PlanResponse.CopyBytes).
	CopyBytes int64 `json:"copy_bytes,omitempty"`
	// PlannedValues digests, for a step run plans again, the values this
	// plan knew of its inputs and outputs (plannedvalues.go).
	PlannedValues PlannedValues `json:"planned_values,omitempty"`
	// MovedFrom is the address whose record, carried here by a moved
	// block, the step is decided from (Plan.Moved).
	MovedFrom *phases.Address `json:"moved_from,omitempty"`
}

// IsCheck reports whether the entry is a check.
func (s *StepPlan) IsCheck() bool { return s.When != "" }

// HasChanges reports whether running the plan would do anything at all:
// move a record, change a step or run a check. It is what plan
// --detailed-exitcode and "nothing to run" go by, so that no view decides
// it on its own.
func (p *Plan) HasChanges() bool {
	return len(p.Moved) > 0 || len(p.LetGo) > 0 || slices.ContainsFunc(p.Phases, (*PhasePlan).HasChanges)
}

// HasChanges reports whether some step or check of the phase would run.
func (pp *PhasePlan) HasChanges() bool {
	return slices.ContainsFunc(pp.Steps, func(sp *StepPlan) bool { return sp.Action != providers.NoOp })
}

// rechecks reports whether some step of the phase is to be read again
// after steps of an earlier phase of the run: the phase runs for them.
func (pp *PhasePlan) rechecks() bool {
	return slices.ContainsFunc(pp.Steps, func(sp *StepPlan) bool { return len(sp.Recheck) > 0 })
}

// Phase finds a phase's plan by name.
func (p *Plan) Phase(name string) *PhasePlan {
	for _, ph := range p.Phases {
		if ph.Name == name {
			return ph
		}
	}
	return nil
}

// PlanOptions select what to plan.
type PlanOptions struct {
	// Phases to plan; empty plans every phase.
	Phases []string
}

// Plan compares every selected step with its record and with what its
// provider observes. It changes nothing.
func (e *Engine) Plan(ctx context.Context, opts PlanOptions) (*Plan, phases.Diagnostics) {
	selected, err := e.selectPhases(opts.Phases)
	if err != nil {
		return nil, phases.FromError("Unknown phase", err)
	}
	snap := e.state.Snapshot()
	plan := &Plan{FormatVersion: PlanFormatVersion, Lineage: snap.Lineage, Serial: snap.Serial}
	var diags phases.Diagnostics
	snap, plan.Moved, diags = e.moves(snap)
	if diags.HasErrors() {
		return plan, diags
	}
	plan.LetGo = e.forgets(snap)
	out := e.loadOutputs(snap)
	out.upstream = map[phases.Address]bool{} // the plan goes in dependency order
	contracts := e.contracts(ctx, selected, snap)
	progs, d := e.programs(selected, snap)
	plan.Programs, diags = progs, append(diags, d...)
	var left []leftRecord // records no provider may undo
	for _, ph := range selected {
		pp := &PhasePlan{Name: ph.Name, Description: ph.Description, Complete: phaseComplete(ph, snap)}
		plan.Phases = append(plan.Phases, pp)
		changes := false
		reverts, l := e.planRemoved(ph, snap)
		left = append(left, l...)
		for _, sp := range reverts {
			changes = true
			pp.Steps = append(pp.Steps, sp)
		}
		steps := newStepGraph(ph.Steps).order()
		for _, s := range append(steps, ph.Checks...) {
			sp, d := e.planStep(ctx, s, snap.Steps[s.Addr.String()], out, snapshotLookup(snap), changes)
			diags = append(diags, withSubject(d, s.Range)...)
			changes = changes || sp.Action != providers.NoOp && !s.IsCheck()
			sp.Contract = contracts[s.Addr]
			sp.MovedFrom = movedFrom(plan.Moved, s.Addr)
			sp.WaitsFor = ph.WaitsFor(s)
			pp.Steps = append(pp.Steps, sp)
		}
	}
	diags = append(diags, e.leftDiags(left, len(opts.Phases) == 0, snap)...)
	services, d := e.estimateServices(plan, snap)
	plan.Services, diags = services, append(diags, d...)
	return plan, e.redactDiags(diags)
}

// redactDiags keeps secrets out of diagnostics a provider wrote.
func (e *Engine) redactDiags(d phases.Diagnostics) phases.Diagnostics {
	return e.hooks.redactor.Diags(d)
}

// planStep plans one step or check (changes: some step of its phase
// changes before a check): it gathers the facts decide asks for, and asks
// its provider for the diff of what it decided. Steps that will change
// make their outputs unknown to the steps after them. Its diagnostics
// get s as their subject when they have none (Plan).
func (e *Engine) planStep(ctx context.Context, s *phases.Step, rec *state.StepRecord, out *outputs, find lookup, changes bool) (*StepPlan, phases.Diagnostics) {
	sp := &StepPlan{Addr: s.Addr, Group: s.Addr.GroupPrefix(), When: s.When}
	if rec != nil {
		sp.Status = rec.Status
	}
	f := e.recordFacts(s, rec, find)
	f.PhaseChanges = changes
	var g stepInputs
	var diags phases.Diagnostics
	// Whichever way it returns, a step run plans again keeps its planned
	// values, from the inputs evaluated here.
	defer func() {
		cfg := g.cfg
		if f.InputsInvalid {
			cfg = cty.DynamicVal
		}
		e.keepPlannedValues(sp, s, cfg, out)
	}()
	d := decide(f)
	for ; d.Needs&(NeedInputs|NeedRead) != 0; d = decide(f) {
		if d.Needs&NeedInputs != 0 {
			g = e.inputFacts(ctx, s, out, &f)
			diags = g.diags
		} else {
			diags = append(diags, g.read(ctx, s, rec, &f).Diagnostics...)
		}
	}
	if d.Reason == Unreadable {
		diags = g.diags // no error: read again after the steps before it
	}
	sp.Action, sp.ReasonCode, sp.Why, sp.KnownAfter = d.Action, d.Reason, d.Why, g.after
	if !s.IsCheck() {
		sp.InputHash = e.plannedHash(s, g.in, out) // a check's plan holds none to compare
	}
	if d.Needs&NeedReadAfter != 0 {
		sp.Recheck = d.Why.By
		out.markRecheck(s.Addr)
	}
	if d.Action == providers.NoOp {
		if r := f.Read; r != nil && r.Observation == providers.Present && r.Outputs != cty.NilVal && !r.Outputs.IsNull() && d.Reason != Unreadable {
			out.set(s.Addr, r.Outputs)
		}
		return sp, diags
	}
	if !s.IsCheck() {
		out.pending(s.Addr)
	}
	switch d.Reason {
	case InputsInvalid, ProviderFailed:
		return sp, diags
	case ProviderWaits:
		// Nothing can be asked of its provider before the steps it waits
		// for ran: the whole diff is deferred.
		sp.KnownAfter = union(sp.KnownAfter, d.Why.By)
		sp.Deferred, sp.InputHash, sp.Diff = true, "", deferredDiff(sp.KnownAfter)
		return sp, diags
	case InFlight:
		// What the stopped run started may still be under way (a node
		// rebooting into its install): the run observes it first,
		// waiting for that, and plans it then if it must run.
		sp.Deferred, sp.InputHash = true, ""
		sp.Diff = "(planned when it runs: it is observed first, waiting for what the stopped run started)"
		return sp, diags
	}
	prior := priorOf(rec)
	if s.IsCheck() || d.Reason == UpstreamReplaced || d.Reason == TargetReplaced {
		prior = nil // the record is no proof: it is of another world
	}
	resp := g.p.Plan(ctx, providers.PlanRequest{Type: s.Addr.Type, Addr: s.Addr, Config: g.cfg, Prior: prior, Action: sp.Action,
		AfterChanges: g.afterChanges})
	diags = append(diags, e.takeDiff(sp, resp)...)
	if s.IsCheck() {
		return sp, diags
	}
	sp.Irreversible = e.hooks.redactor.Text(resp.Irreversible)
	sp.Planned, sp.CopyBytes = resp.Private, resp.CopyBytes
	if !resp.Diagnostics.HasErrors() {
		out.planned(s.Addr, resp.Outputs)
	}
	return sp, diags
}

// takeDiff sets sp's diff from a provider's plan, redacted, its unknown
// values naming the steps they wait for, and returns the diagnostics that
// count. A provider that cannot plan a step before the steps it waits for
// have run (it dials a node one of them creates) does not fail the plan:
// the diff is deferred until they have, and run plans the step again then.
func (e *Engine) takeDiff(sp *StepPlan, resp providers.PlanResponse) phases.Diagnostics {
	diags, diff := resp.Diagnostics, resp.Diff
	if len(sp.KnownAfter) > 0 {
		switch {
		case diags.HasErrors() && !definite(diags):
			var warnings phases.Diagnostics
			for _, d := range diags {
				if d.Severity != phases.Error {
					warnings = append(warnings, d)
				}
			}
			diags, diff, sp.Deferred = warnings, deferredDiff(sp.KnownAfter), true
		case wholeDiffDeferred(diff):
			sp.Deferred = true
		}
		diff = nameKnownAfter(diff, sp.KnownAfter)
	}
	sp.Diff = e.hooks.redactor.Text(diff)
	return diags
}

// definite: some error of diags holds whatever the unknown values turn
// out to be, so the plan must fail now rather than defer.
func definite(diags phases.Diagnostics) bool {
	for _, d := range diags {
		if d.Severity == phases.Error && d.Definite {
			return true
		}
	}
	return false
}

func priorOf(rec *state.StepRecord) *providers.Prior {
	if rec == nil || rec.Status != state.Done && rec.Revert == nil {
		return nil
	}
	v, _, err := decodeOutputs(rec.Outputs)
	if err != nil {
		v = cty.EmptyObjectVal
	}
	return &providers.Prior{Outputs: v, Private: rec.Private, Revert: rec.Revert}
}

// phaseComplete: every step done and every after-check passed.
func phaseComplete(ph *phases.Phase, snap *state.Snapshot) bool {
	return !slices.ContainsFunc(slices.Concat(ph.Steps, ph.Checks), func(s *phases.Step) bool {
		rec := snap.Steps[s.Addr.String()]
		return (!s.IsCheck() || s.When == phases.CheckAfter) && (rec == nil || rec.Status != state.Done)
	})
}

// WritePlan saves a plan (plan --out) readable only by its owner. The file
// is replaced atomically: a crash or a full disk leaves the previous plan
// or the new one, never a truncated plan that run --plan would refuse.
func WritePlan(path string, p *Plan) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("saving the plan: %w", err)
	}
	if err := state.WriteFile(path, append(b, '\n')); err != nil {
		return fmt.Errorf("saving the plan: %w", err)
	}
	return nil
}

// ReadPlan loads a plan saved by WritePlan, refusing another format
// version.
func ReadPlan(path string) (*Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the plan: %w", err)
	}
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("reading the plan %s: %w", path, err)
	}
	if p.FormatVersion != PlanFormatVersion {
		return nil, fmt.Errorf("the plan %s is in format version %d; this migrate reads version %d: make a new plan", path, p.FormatVersion, PlanFormatVersion)
	}
	return &p, nil
}

// knownAfterText is how a plan shows a value that waits for the steps of
// after: "(known after exec.first)".
func knownAfterText(after []phases.Address) string {
	return "(known after " + joinAddrs(after) + ")"
}

// nameKnownAfter rewrites a provider's diff so that each value it could
// not know names the steps it waits for.
func nameKnownAfter(diff string, after []phases.Address) string {
	if len(after) == 0 {
		return diff
	}
	return strings.ReplaceAll(diff, phases.UnknownText, knownAfterText(after))
}

// wholeDiffDeferred reports whether a provider deferred its whole diff
// ("(known after apply): attrs", as providers/sdk writes it for a step
// type that cannot plan with unknown values).
func wholeDiffDeferred(diff string) bool {
	return strings.HasPrefix(diff, phases.UnknownText+": ")
}

// deferredDiff is the diff of a step whose provider could not plan it
// before the steps it waits for have run.
func deferredDiff(after []phases.Address) string {
	return fmt.Sprintf("diff deferred until %s %s run", joinAddrs(after), plural(len(after), "has", "have"))
}

func joinAddrs(list []phases.Address) string {
	s := make([]string, len(list))
	for i, a := range list {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// union adds the addresses of b missing from a, sorted.
func union(a, b []phases.Address) []phases.Address {
	out := slices.Concat(a, b)
	slices.SortFunc(out, func(x, y phases.Address) int { return strings.Compare(x.String(), y.String()) })
	return slices.Compact(out)
}
