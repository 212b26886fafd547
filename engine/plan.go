package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

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
	Addr phases.Address   `json:"address"`
	When phases.CheckWhen `json:"when,omitempty"`
	// Action is what a run will do; checks that will run say Create. In
	// JSON it is its name ("action": "create"; see MarshalJSON).
	Action providers.Action `json:"-"`
	Status state.Status     `json:"status,omitempty"`
	// Diff is the provider's account of the change, redacted.
	Diff string `json:"diff,omitempty"`
	// Detail explains the action (what drifted, why an update).
	Detail string `json:"detail,omitempty"`
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
}

// IsCheck reports whether the entry is a check.
func (s *StepPlan) IsCheck() bool { return s.When != "" }

// HasChanges reports whether running the plan would do anything at all:
// change a step or run a check. It is what plan --detailed-exitcode and
// "nothing to run" go by, so that no view decides it on its own.
func (p *Plan) HasChanges() bool {
	for _, ph := range p.Phases {
		if ph.HasChanges() {
			return true
		}
	}
	return false
}

// HasChanges reports whether some step or check of the phase would run.
func (pp *PhasePlan) HasChanges() bool {
	for _, sp := range pp.Steps {
		if sp.Action != providers.NoOp {
			return true
		}
	}
	return false
}

// rechecks reports whether some step of the phase is to be read again
// after steps of an earlier phase of the run: the phase runs for them.
func (pp *PhasePlan) rechecks() bool {
	for _, sp := range pp.Steps {
		if len(sp.Recheck) > 0 {
			return true
		}
	}
	return false
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

// stepPlanJSON is a StepPlan as JSON: its Action by name.
type stepPlanJSON struct {
	Action string `json:"action"`
	*plainStepPlan
}

type plainStepPlan StepPlan

// MarshalJSON writes Action by its name.
func (s StepPlan) MarshalJSON() ([]byte, error) {
	return json.Marshal(stepPlanJSON{s.Action.String(), (*plainStepPlan)(&s)})
}

// UnmarshalJSON restores Action from its name.
func (s *StepPlan) UnmarshalJSON(b []byte) error {
	v := stepPlanJSON{plainStepPlan: (*plainStepPlan)(s)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	for a := providers.NoOp; a <= providers.Revert; a++ {
		if a.String() == v.Action {
			s.Action = a
			return nil
		}
	}
	return fmt.Errorf("unknown action %q in plan", v.Action)
}

// outputs is the table of step outputs that evaluation sees; it is read
// by parallel evaluations while finished steps add to it.
type outputs struct {
	mu       sync.RWMutex
	m        map[phases.Address]cty.Value
	corrupt  map[phases.Address]error // recorded outputs that do not decode
	changing map[phases.Address]bool  // steps this plan changes
	recheck  map[phases.Address]bool  // steps read again after those they depend on
}

func (o *outputs) evaluate(s *phases.Step) (cty.Value, phases.Diagnostics) {
	v, _, d := o.evaluateAfter(s)
	return v, d
}

// evaluateAfter is evaluate that also says which steps the unknown values
// in the result wait for.
func (o *outputs) evaluateAfter(s *phases.Step) (cty.Value, []phases.Address, phases.Diagnostics) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	if d := o.corruptInputs(s); d != nil {
		return cty.DynamicVal, nil, withSubject(d, s.Range)
	}
	v, d := s.Config.Evaluate(o.m)
	v, after := stripKnownAfter(v)
	return v, after, withSubject(d, s.Range)
}

func (o *outputs) set(a phases.Address, v cty.Value) {
	o.mu.Lock()
	o.m[a] = v
	o.mu.Unlock()
}

// pending makes a's outputs unknown until a has run, and a a step that
// changes.
func (o *outputs) pending(a phases.Address) {
	o.mu.Lock()
	o.m[a] = unknownUntil(a)
	o.changing[a] = true
	o.mu.Unlock()
}

// planned gives the steps after a the outputs its plan already knows
// (providers.PlanResponse.Outputs); what it does not know stays unknown
// until a has run. a still changes.
func (o *outputs) planned(a phases.Address, v cty.Value) {
	if v == cty.NilVal || v.IsNull() {
		return
	}
	marked, err := cty.Transform(v, func(_ cty.Path, x cty.Value) (cty.Value, error) {
		if !x.IsKnown() {
			return x.Mark(knownAfter(a)), nil
		}
		return x, nil
	})
	if err != nil {
		return
	}
	o.mu.Lock()
	o.m[a] = marked
	o.mu.Unlock()
}

// changesBefore lists the steps of deps that change in this plan, or
// that are read again after steps that do.
func (o *outputs) changesBefore(deps []phases.Address) []phases.Address {
	o.mu.RLock()
	defer o.mu.RUnlock()
	var out []phases.Address
	for _, d := range deps {
		if o.changing[d] || o.recheck[d] {
			out = append(out, d)
		}
	}
	return out
}

func (o *outputs) markRecheck(a phases.Address) {
	o.mu.Lock()
	o.recheck[a] = true
	o.mu.Unlock()
}

// afterChanges reports whether a step of deps changes in this plan.
func (o *outputs) afterChanges(deps []phases.Address) bool {
	o.mu.RLock()
	defer o.mu.RUnlock()
	for _, d := range deps {
		if o.changing[d] {
			return true
		}
	}
	return false
}

// loadOutputs seeds the table with every recorded output; steps that have
// not run are unknown.
func (e *Engine) loadOutputs(snap *state.Snapshot) *outputs {
	o := &outputs{m: make(map[phases.Address]cty.Value, len(e.steps)), corrupt: map[phases.Address]error{}, changing: map[phases.Address]bool{}, recheck: map[phases.Address]bool{}}
	for addr := range e.steps {
		o.m[addr] = unknownUntil(addr)
		rec := snap.Steps[addr.String()]
		if rec == nil || rec.Status != state.Done {
			continue
		}
		if v, _, err := decodeOutputs(rec.Outputs); err == nil {
			o.m[addr] = v
		} else {
			o.corrupt[addr] = err
		}
	}
	return o
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
	out := e.loadOutputs(snap)
	contracts := e.contracts(ctx, selected, snap)
	var diags phases.Diagnostics
	plan.Programs, diags = e.programs(selected)
	for _, ph := range selected {
		pp := &PhasePlan{Name: ph.Name, Description: ph.Description, Complete: phaseComplete(ph, snap)}
		plan.Phases = append(plan.Phases, pp)
		changes := false
		for _, s := range newStepGraph(ph.Steps).order() {
			sp, d := e.planStep(ctx, s, snap.Steps[s.Addr.String()], out, snapshotLookup(snap))
			diags = append(diags, d...)
			if sp.Action != providers.NoOp {
				changes = true
			}
			sp.Contract = contracts[s.Addr]
			pp.Steps = append(pp.Steps, sp)
		}
		for _, c := range ph.Checks {
			rec := snap.Steps[c.Addr.String()]
			sp := &StepPlan{Addr: c.Addr, When: c.When, Action: providers.NoOp, Contract: contracts[c.Addr]}
			if rec != nil {
				sp.Status = rec.Status
			}
			if changes || rec == nil || rec.Status != state.Done {
				sp.Action = providers.Create
				cfg, after, d := out.evaluateAfter(c)
				diags = append(diags, d...)
				if !d.HasErrors() {
					sp.KnownAfter = waitsFor(cfg, after)
					p, provAfter, pd := e.use(ctx, c, out)
					diags = append(diags, pd...)
					switch {
					case pd.HasErrors():
					case p == nil:
						deferProvider(sp, c, provAfter)
					default:
						resp := p.Plan(ctx, providers.PlanRequest{Type: c.Addr.Type, Addr: c.Addr, Config: cfg, Action: providers.Create,
							AfterChanges: out.afterChanges(c.DependsOn)})
						diags = append(diags, withSubject(e.takeDiff(sp, resp), c.Range)...)
					}
				}
			}
			pp.Steps = append(pp.Steps, sp)
		}
	}
	return plan, e.redactDiags(diags)
}

// redactDiags keeps secrets out of diagnostics a provider wrote.
func (e *Engine) redactDiags(d phases.Diagnostics) phases.Diagnostics {
	return e.hooks.redactor.Diags(d)
}

// planStep decides one step's action. Steps that will change make their
// outputs unknown to the steps after them.
func (e *Engine) planStep(ctx context.Context, s *phases.Step, rec *state.StepRecord, out *outputs, find lookup) (*StepPlan, phases.Diagnostics) {
	sp := &StepPlan{Addr: s.Addr, Action: providers.NoOp}
	if rec != nil {
		sp.Status = rec.Status
	}
	if why := e.leftToInFlight(s, rec, find); why != "" {
		sp.Detail = why
		return sp, nil
	}
	if rec != nil && rec.Status == state.Done {
		if by, gone := e.goneWith(s.Addr, find); gone {
			// What it made went with what a later step deleted (a VM and
			// the cluster inside it): there is nothing left to ask.
			sp.Detail = fmt.Sprintf("went with %s (done): not read again", by)
			return sp, nil
		}
	}
	cfg, after, diags := out.evaluateAfter(s)
	if diags.HasErrors() {
		sp.Action = providers.Create
		out.pending(s.Addr)
		return sp, diags
	}
	sp.KnownAfter = waitsFor(cfg, after)
	p, provAfter, pd := e.use(ctx, s, out)
	diags = append(diags, pd...)
	if pd.HasErrors() {
		sp.Action = providers.Create
		out.pending(s.Addr)
		return sp, diags
	}
	if p == nil {
		// Its provider waits for steps that will run first: nothing can
		// be asked of it before, so the whole diff is deferred.
		sp.Action = providers.Create
		if rec != nil && rec.Status == state.Done {
			sp.Action = providers.Update
		}
		deferProvider(sp, s, provAfter)
		out.pending(s.Addr)
		return sp, diags
	}
	in := e.stepInputs(ctx, s, cfg)
	sp.InputHash = e.plannedHash(s, in, out)
	prior := priorOf(rec)

	switch {
	case rec == nil || rec.Status == state.Pending || rec.Status == state.Reverted:
		sp.Action = providers.Create
	case rec.Status == state.Running:
		planInFlight(sp)
		out.pending(s.Addr)
		return sp, diags
	case rec.Status == state.Failed:
		sp.Action = providers.Create
		sp.Detail = "failed last time: " + rec.LastError
	case rec.Status == state.Reverting || rec.Status == state.RevertFailed:
		sp.Action = providers.Create
		sp.Detail = "a rollback of this step did not finish"
	case !in.matches(rec.InputHash):
		sp.Action, sp.Detail = providers.Update, e.inputsChanged(in.hash, rec.InputHash, cfg)
	default:
		stays, readDiags := e.observeDone(ctx, s, rec, p, cfg, out, find, sp)
		diags = append(diags, readDiags...)
		if stays {
			return sp, diags
		}
		if sp.Action == providers.Create {
			prior = nil // the record is no proof: it is of another world
		}
	}
	out.pending(s.Addr)
	resp := p.Plan(ctx, providers.PlanRequest{Type: s.Addr.Type, Addr: s.Addr, Config: cfg, Prior: prior, Action: sp.Action,
		AfterChanges: out.afterChanges(s.DependsOn)})
	diags = append(diags, withSubject(e.takeDiff(sp, resp), s.Range)...)
	sp.Irreversible = e.hooks.redactor.Text(resp.Irreversible)
	sp.Planned = resp.Private
	if !resp.Diagnostics.HasErrors() {
		out.planned(s.Addr, resp.Outputs)
	}
	return sp, diags
}

// leftToInFlight says why s is left to a step a stopped run was applying
// (s goes with it, or what s made was handed over to it), empty when it
// is not: such a step is not planned until that one is recorded.
func (e *Engine) leftToInFlight(s *phases.Step, rec *state.StepRecord, find lookup) string {
	if by, going := e.goingWith(s.Addr, rec, find); going {
		return "it goes with " + by.String() + ", which a stopped run was applying"
	}
	if by, consumed := e.consumedInFlight(s, rec, find); consumed {
		return "handed over to " + by.String() + ", which a stopped run was applying: read again once it is recorded"
	}
	return ""
}

// planInFlight makes sp the plan of a step a stopped run was applying.
// What that run started may still be under way (a node rebooting into
// its install): its provider may not be able to plan it now. The run
// observes it first, waiting for that as the stopped run would have, and
// plans it then if it must run.
func planInFlight(sp *StepPlan) {
	sp.Action = providers.Create
	sp.Detail = "was running when a run stopped: it is observed first and redone only if it did not finish"
	sp.Deferred, sp.InputHash = true, ""
	sp.Diff = "(planned when it runs: it is observed first, waiting for what the stopped run started)"
}

// inputsChanged says why a done step whose input hash (hash, empty when
// it cannot be known yet) differs from its record's (recorded) runs again.
func (e *Engine) inputsChanged(hash, recorded string, cfg cty.Value) string {
	if why := e.otherKey(recorded); why != "" && hash != "" {
		return why
	}
	switch {
	case hash == "" && !cfg.IsWhollyKnown():
		return "its inputs depend on steps that will change"
	case hash == "":
		return "its provider cannot tell yet whether what it depends on changed"
	}
	return "its inputs changed since it ran"
}

// observeDone plans a step recorded done with the inputs it ran with: its
// provider reads it. It reports whether the step stays done (nothing to
// plan; a step it depends on may have it read again: Recheck); if not,
// sp says why it runs: Create when its record is about a world since
// replaced (no proof of anything), Drift when its effect changed or went.
func (e *Engine) observeDone(ctx context.Context, s *phases.Step, rec *state.StepRecord, p providers.Interface, cfg cty.Value, out *outputs, find lookup, sp *StepPlan) (bool, phases.Diagnostics) {
	if why := replacedSince(s, rec, find); why != "" {
		sp.Action, sp.Detail = providers.Create, why
		return false, nil
	}
	read := p.Read(ctx, providers.ReadRequest{Type: s.Addr.Type, Addr: s.Addr, Config: cfg, Prior: priorOf(rec)})
	if before := out.changesBefore(s.DependsOn); len(before) > 0 && read.Diagnostics.HasErrors() {
		// What it acts on is made again by steps before it in this run
		// (a node reinstalled on a VM made anew): not there to be read
		// yet, which is no error. The run reads it after them.
		sp.Recheck = before
		out.markRecheck(s.Addr)
		sp.Detail = "cannot be read before " + joinAddrs(before) + " ran: read again after them"
		return true, nil
	}
	diags := withSubject(read.Diagnostics, s.Range)
	if why := targetReplaced(rec, read.Identity); why != "" {
		sp.Action, sp.Detail = providers.Create, why
		return false, diags
	}
	switch read.Observation {
	case providers.Drifted:
		sp.Action, sp.Detail = providers.Drift, read.Detail
		return false, diags
	case providers.Absent:
		sp.Action, sp.Detail = providers.Drift, "its effect is gone"
		if read.Detail != "" {
			sp.Detail = read.Detail
		}
		return false, diags
	}
	if read.Observation == providers.Present && read.Outputs != cty.NilVal && !read.Outputs.IsNull() {
		out.set(s.Addr, read.Outputs)
	}
	if before := out.changesBefore(s.DependsOn); len(before) > 0 {
		// Done now, but what it acts on may be made by the steps before
		// it in this run: read again after them.
		sp.Recheck = before
		out.markRecheck(s.Addr)
	}
	return true, diags
}

// deferProvider makes sp the plan of a step whose provider is configured
// from outputs of steps that have not run yet.
func deferProvider(sp *StepPlan, s *phases.Step, after []phases.Address) {
	sp.KnownAfter = union(sp.KnownAfter, after)
	sp.Deferred = true
	sp.InputHash = ""
	sp.Diff = deferredDiff(sp.KnownAfter)
	sp.Detail = providerWaits(s, after)
}

// waitsFor is the list of steps a step's inputs wait for, when some of
// them are not known yet.
func waitsFor(cfg cty.Value, after []phases.Address) []phases.Address {
	if cfg.IsWhollyKnown() {
		return nil
	}
	return after
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
	for _, s := range ph.Steps {
		if rec := snap.Steps[s.Addr.String()]; rec == nil || rec.Status != state.Done {
			return false
		}
	}
	for _, c := range ph.Checks {
		if c.When != phases.CheckAfter {
			continue
		}
		if rec := snap.Steps[c.Addr.String()]; rec == nil || rec.Status != state.Done {
			return false
		}
	}
	return true
}
