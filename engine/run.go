package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// ErrInterrupted is returned when a run or rollback stopped early because
// it was asked to; the state says where.
var ErrInterrupted = errors.New("interrupted: the state records where it stopped; run the same command again to resume")

// StaleError says a saved plan no longer matches the state.
type StaleError struct {
	PlanLineage, StateLineage string
	PlanSerial, StateSerial   uint64
}

func (e *StaleError) Error() string {
	if e.PlanLineage != e.StateLineage {
		return fmt.Sprintf("the plan was made for another state (lineage %s, this state is %s): make a new plan", e.PlanLineage, e.StateLineage)
	}
	return fmt.Sprintf("the state changed since the plan was made (serial %d then, %d now): make a new plan", e.PlanSerial, e.StateSerial)
}

// PhaseError says a phase did not complete.
type PhaseError struct {
	Phase  string
	Failed []phases.Address
	// Skipped steps did not run because a step they depend on failed.
	Skipped []phases.Address
	Checks  []phases.Address
}

func (e *PhaseError) Error() string {
	var parts []string
	if len(e.Checks) > 0 {
		parts = append(parts, "check(s) failed: "+joinAddrs(e.Checks))
	}
	if len(e.Failed) > 0 {
		parts = append(parts, "step(s) failed: "+joinAddrs(e.Failed))
	}
	if len(e.Skipped) > 0 {
		parts = append(parts, "not run because a dependency failed: "+joinAddrs(e.Skipped))
	}
	return fmt.Sprintf("phase %s did not complete: %s", e.Phase, strings.Join(parts, "; "))
}

// RunOptions tune a run.
type RunOptions struct {
	// Approve lists the approval steps consented to with --approve.
	Approve map[phases.Address]bool
	// Approver is user@host, recorded with an approval.
	Approver string
	// Prompt asks the person at the terminal; nil when not interactive.
	Prompt func(question string) (bool, error)
}

// Run executes the plan's phases in order. stop ends the run gently (no
// new step starts, running ones finish); cancel aborts running steps.
// Every transition is checkpointed before hooks see it.
func (e *Engine) Run(stop, cancel context.Context, plan *Plan, opts RunOptions) error {
	snap := e.state.Snapshot()
	if err := e.check(plan, snap); err != nil {
		return err
	}
	e.hooks.logValue("plan", plan)
	out := e.loadOutputs(snap)
	for _, pp := range plan.Phases {
		ph := e.runbook.Phase(pp.Name)
		if stop.Err() != nil {
			return ErrInterrupted
		}
		if err := e.runPhase(stop, cancel, ph, pp, out, opts); err != nil {
			return err
		}
	}
	return nil
}

// Check says whether Run would accept the plan: made against this state,
// naming phases the runbook has, with every earlier phase complete. The
// CLI calls it before showing a plan for confirmation.
func (e *Engine) Check(plan *Plan) error {
	return e.check(plan, e.state.Snapshot())
}

func (e *Engine) check(plan *Plan, snap *state.Snapshot) error {
	if plan.Lineage != snap.Lineage && plan.Lineage != "" || plan.Serial != snap.Serial {
		return &StaleError{PlanLineage: plan.Lineage, StateLineage: snap.Lineage, PlanSerial: plan.Serial, StateSerial: snap.Serial}
	}
	for _, pp := range plan.Phases {
		if e.runbook.Phase(pp.Name) == nil {
			return fmt.Errorf("the plan names phase %q, which the runbook no longer has: make a new plan", pp.Name)
		}
	}
	return e.checkEarlierPhases(plan, snap)
}

// checkEarlierPhases refuses to run a phase whose predecessors are not
// complete, unless they run first in this same plan.
func (e *Engine) checkEarlierPhases(plan *Plan, snap *state.Snapshot) error {
	inPlan := map[string]bool{}
	for _, pp := range plan.Phases {
		ph := e.runbook.Phase(pp.Name)
		if ph == nil {
			continue
		}
		var missing []string
		for _, before := range e.phasesBefore(ph) {
			if !inPlan[before.Name] && !phaseComplete(before, snap) {
				missing = append(missing, before.Name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("phase %s runs after %s, which %s not complete: run `migrate run --phase %s` first (or --all)",
				ph.Name, strings.Join(missing, ", "), plural(len(missing), "is", "are"), missing[0])
		}
		inPlan[pp.Name] = true
	}
	return nil
}

// PhaseUpToDate is the Message of the PhaseCompleted event of a phase that
// was complete before the run and has nothing to do.
const PhaseUpToDate = "already complete, nothing to do"

func (e *Engine) runPhase(stop, cancel context.Context, ph *phases.Phase, pp *PhasePlan, out *outputs, opts RunOptions) error {
	start := time.Now()
	if pp.Complete && !pp.HasChanges() {
		return e.hooks.emit(Event{Kind: PhaseCompleted, Phase: ph.Name, Message: PhaseUpToDate})
	}
	if err := e.hooks.emit(Event{Kind: PhaseStarted, Phase: ph.Name}); err != nil {
		return err
	}
	planned := map[phases.Address]*StepPlan{}
	for _, sp := range pp.Steps {
		planned[sp.Addr] = sp
	}
	r := &stepRunner{e: e, cancel: cancel, out: out, opts: opts, planned: planned}

	var failedChecks []phases.Address
	var before, after []*phases.Step
	for _, c := range ph.Checks {
		if c.When == phases.CheckBefore {
			before = append(before, c)
		} else {
			after = append(after, c)
		}
	}
	runChecks := func(list []*phases.Step) {
		for _, c := range list {
			if sp := planned[c.Addr]; sp != nil && sp.Action == providers.NoOp {
				continue
			}
			if stop.Err() != nil {
				return
			}
			if !r.run(c) {
				failedChecks = append(failedChecks, c.Addr)
			}
		}
	}
	runChecks(before)
	if r.fatal() != nil {
		return r.fatal()
	}
	if len(failedChecks) > 0 {
		err := &PhaseError{Phase: ph.Name, Checks: failedChecks}
		e.hooks.emit(Event{Kind: PhaseFailed, Phase: ph.Name, Error: err.Error(), Duration: time.Since(start)})
		return err
	}

	g := newGraph(ph.Steps)
	res := g.walk(stop, e.parallelism, r.run)
	if r.fatal() != nil {
		return r.fatal()
	}
	perr := &PhaseError{Phase: ph.Name}
	interrupted := false
	for i, x := range res {
		switch x {
		case failed:
			perr.Failed = append(perr.Failed, g.nodes[i].Addr)
		case skipped:
			perr.Skipped = append(perr.Skipped, g.nodes[i].Addr)
			e.hooks.emit(Event{Kind: StepSkipped, Phase: ph.Name, Addr: g.nodes[i].Addr, Message: "a step it depends on failed"})
		case notStarted:
			interrupted = true
		}
	}
	if len(perr.Failed) > 0 {
		e.hooks.emit(Event{Kind: PhaseFailed, Phase: ph.Name, Error: perr.Error(), Duration: time.Since(start)})
		return perr
	}
	if interrupted || stop.Err() != nil {
		e.hooks.emit(Event{Kind: Interrupted, Phase: ph.Name})
		return ErrInterrupted
	}
	runChecks(after)
	if r.fatal() != nil {
		return r.fatal()
	}
	if len(failedChecks) > 0 {
		perr.Checks = failedChecks
		e.hooks.emit(Event{Kind: PhaseFailed, Phase: ph.Name, Error: perr.Error(), Duration: time.Since(start)})
		return perr
	}
	if stop.Err() != nil {
		return ErrInterrupted
	}
	return e.hooks.emit(Event{Kind: PhaseCompleted, Phase: ph.Name, Duration: time.Since(start)})
}

// stepRunner runs single steps; it is shared by the goroutines of a walk.
type stepRunner struct {
	e       *Engine
	cancel  context.Context
	out     *outputs
	opts    RunOptions
	planned map[phases.Address]*StepPlan

	mu  sync.Mutex
	err error // a hook (the state) failed: the run must stop
}

func (r *stepRunner) fatal() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// emit sends an event; a failing hook makes the whole run stop.
func (r *stepRunner) emit(ev Event) bool {
	if err := r.e.hooks.emit(ev); err != nil {
		r.mu.Lock()
		if r.err == nil {
			r.err = fmt.Errorf("recording %s: %w", ev.Addr, err)
		}
		r.mu.Unlock()
		return false
	}
	return true
}

// run brings one step (or check) to done, reporting whether it is.
func (r *stepRunner) run(s *phases.Step) bool {
	if r.fatal() != nil {
		return false
	}
	e := r.e
	p := e.provider(s)
	rec, ok := e.state.Step(s.Addr)
	if !ok {
		rec = &state.StepRecord{Addr: s.Addr, Phase: s.Phase, Check: s.IsCheck(), Status: state.Pending}
	}
	cfg, diags := r.out.evaluate(s)
	if diags.HasErrors() {
		return r.fail(s, rec, diags.Err())
	}
	hash := e.stepInputHash(r.cancel, s, cfg)
	sp := r.planned[s.Addr]
	if sp != nil && sp.InputHash != "" && hash != sp.InputHash {
		return r.fail(s, rec, fmt.Errorf("its inputs changed since the plan was made: make a new plan"))
	}

	if !s.IsCheck() {
		switch rec.Status {
		case state.Done:
			if (sp == nil || sp.Action == providers.NoOp) && hash == rec.InputHash {
				r.refreshOutputs(s, p, cfg, rec)
				return true
			}
		case state.Running:
			// A run stopped while this step ran: ask what is there
			// before doing it again.
			read := p.Read(r.cancel, providers.ReadRequest{Type: s.Addr.Type, Addr: s.Addr, Config: cfg, Prior: priorOf(rec)})
			if read.Observation == providers.Present && !read.Diagnostics.HasErrors() {
				return r.adopt(s, rec, cfg, hash, read)
			}
		}
	}

	if rec.Status == state.Reverted || rec.Status == state.Done {
		// Attempts count the tries of this run of the step: a step
		// applied anew, after a rollback or with new inputs, starts at 1.
		rec.Attempts = 0
	}
	attempts := max(1, s.Retry.Attempts)
	backoff := s.Retry.Backoff
	for attempt := 1; ; attempt++ {
		now := time.Now()
		rec.Status = state.Running
		rec.Attempts++
		rec.StartedAt, rec.FinishedAt = &now, nil
		// Facts such as who approved belong to the apply that made them:
		// a new try that fails must not show the earlier ones.
		rec.Record = nil
		if !r.emit(Event{Kind: StepStarted, Phase: s.Phase, Addr: s.Addr, Check: s.IsCheck(), Attempt: attempt, Record: rec}) {
			return false
		}
		resp := r.apply(s, p, cfg, rec)
		if !resp.Diagnostics.HasErrors() {
			return r.succeed(s, rec, hash, resp, now)
		}
		if resp.Inverse != nil {
			// A failed apply that changed something and knows how to
			// undo it (an instance created, then not started): keep
			// that, so rollback can clean up.
			rec.Inverse = resp.Inverse
		}
		err := resp.Diagnostics.Err()
		if attempt >= attempts || r.cancel.Err() != nil {
			return r.fail(s, rec, err)
		}
		rec.LastError = err.Error()
		if !r.emit(Event{Kind: StepRetrying, Phase: s.Phase, Addr: s.Addr, Check: s.IsCheck(), Attempt: attempt, Error: rec.LastError, Message: fmt.Sprintf("retrying in %s", backoff)}) {
			return false
		}
		select {
		case <-time.After(backoff):
		case <-r.cancel.Done():
			return r.fail(s, rec, r.cancel.Err())
		}
		backoff *= 2
	}
}

func (r *stepRunner) apply(s *phases.Step, p providers.Interface, cfg cty.Value, rec *state.StepRecord) providers.ApplyResponse {
	ctx := r.cancel
	if s.Timeout > 0 {
		var done context.CancelFunc
		ctx, done = context.WithTimeout(ctx, s.Timeout)
		defer done()
	}
	log := &lineWriter{emit: func(line string) {
		r.e.hooks.emit(Event{Kind: StepOutput, Phase: s.Phase, Addr: s.Addr, Check: s.IsCheck(), Message: line})
	}}
	defer log.Flush()
	req := providers.ApplyRequest{
		Type: s.Addr.Type, Addr: s.Addr, Config: cfg, Prior: priorOf(rec), Log: log,
		Approval: providers.Approval{Prompt: r.opts.Prompt},
	}
	if sp := r.planned[s.Addr]; sp != nil {
		req.Planned = sp.Planned
	}
	if r.opts.Approve[s.Addr] {
		req.Approval.By = r.opts.Approver
	}
	resp := p.Apply(ctx, req)
	if ctx.Err() == context.DeadlineExceeded && resp.Diagnostics.HasErrors() {
		resp.Diagnostics = append(resp.Diagnostics, phases.Errorf("Step timed out", "Step %s did not finish within its timeout of %s.", s.Addr, s.Timeout)...)
	}
	return resp
}

func (r *stepRunner) succeed(s *phases.Step, rec *state.StepRecord, hash string, resp providers.ApplyResponse, started time.Time) bool {
	r.e.hooks.redactor.AddMarked(resp.Outputs)
	enc, err := encodeOutputs(resp.Outputs)
	if err != nil {
		return r.fail(s, rec, fmt.Errorf("recording outputs: %w", err))
	}
	now := time.Now()
	rec.Status = state.Done
	rec.InputHash = hash
	rec.Outputs = enc
	rec.Private = resp.Private
	rec.Inverse = resp.Inverse
	rec.Record = resp.Record
	rec.FinishedAt = &now
	rec.LastError = ""
	if !r.emit(Event{Kind: StepDone, Phase: s.Phase, Addr: s.Addr, Check: s.IsCheck(), Duration: now.Sub(started), Record: rec}) {
		return false
	}
	if resp.Outputs != cty.NilVal && !resp.Outputs.IsNull() {
		r.out.set(s.Addr, resp.Outputs)
	}
	return true
}

// adopt records a step that finished before the last run could say so.
func (r *stepRunner) adopt(s *phases.Step, rec *state.StepRecord, cfg cty.Value, hash string, read providers.ReadResponse) bool {
	enc, err := encodeOutputs(read.Outputs)
	if err != nil {
		enc = nil
	}
	now := time.Now()
	rec.Status = state.Done
	rec.InputHash = hash
	rec.Outputs = enc
	if read.Inverse != nil {
		rec.Inverse = read.Inverse
	}
	rec.FinishedAt = &now
	rec.LastError = ""
	if !r.emit(Event{Kind: StepAdopted, Phase: s.Phase, Addr: s.Addr, Message: "finished before the last run stopped; recorded without running it again", Record: rec}) {
		return false
	}
	if read.Outputs != cty.NilVal && !read.Outputs.IsNull() {
		r.e.hooks.redactor.AddMarked(read.Outputs)
		r.out.set(s.Addr, read.Outputs)
	}
	return true
}

// refreshOutputs gets outputs the state could not keep (sensitive ones)
// back from the provider, for the steps that refer to them.
func (r *stepRunner) refreshOutputs(s *phases.Step, p providers.Interface, cfg cty.Value, rec *state.StepRecord) {
	if _, redacted, _ := decodeOutputs(rec.Outputs); !redacted {
		return
	}
	read := p.Read(r.cancel, providers.ReadRequest{Type: s.Addr.Type, Addr: s.Addr, Config: cfg, Prior: priorOf(rec)})
	if read.Observation == providers.Present && read.Outputs != cty.NilVal && !read.Outputs.IsNull() {
		r.e.hooks.redactor.AddMarked(read.Outputs)
		r.out.set(s.Addr, read.Outputs)
	}
}

func (r *stepRunner) fail(s *phases.Step, rec *state.StepRecord, err error) bool {
	now := time.Now()
	rec.Status = state.Failed
	// Outputs of an earlier apply no longer describe the step (a refused
	// approval is not approved by anyone); nothing reads a failed step's.
	rec.Outputs = nil
	rec.FinishedAt = &now
	rec.LastError = err.Error()
	r.emit(Event{Kind: StepFailed, Phase: s.Phase, Addr: s.Addr, Check: s.IsCheck(), Error: rec.LastError, Record: rec})
	return false
}

// lineWriter turns a step's output into one event per line.
type lineWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	emit func(string)
}

var _ io.Writer = (*lineWriter)(nil)

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		i := bytes.IndexByte(w.buf.Bytes(), '\n')
		if i < 0 {
			break
		}
		line := string(w.buf.Next(i + 1))
		w.emit(strings.TrimRight(line, "\r\n"))
	}
	return len(p), nil
}

// Flush emits a last line without a newline.
func (w *lineWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf.Len() > 0 {
		w.emit(w.buf.String())
		w.buf.Reset()
	}
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
