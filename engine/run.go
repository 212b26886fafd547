package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/secret"
	"github.com/homelab-migrate/migrate/state"
)

// ErrInterrupted is returned when a run or rollback stopped early because
// it was asked to; the state says where.
var ErrInterrupted = errors.New("interrupted: the state records where it stopped; run the same command again to resume")

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
	// SavedPlan: the plan was saved earlier (run --plan). A step planned
	// again once its inputs are known must then agree with what the saved
	// plan knew of it, or it is refused.
	SavedPlan bool
}

// Run executes the plan's phases in order. stop ends the run gently (no
// new step starts, running ones finish); cancel aborts running steps.
// Every transition is checkpointed before hooks see it.
func (e *Engine) Run(stop, cancel context.Context, plan *Plan, opts RunOptions) error {
	snap := e.state.Snapshot()
	if err := e.check(plan, snap); err != nil {
		return err
	}
	if opts.SavedPlan && e.contractChecked != plan {
		if err := e.checkContract(cancel, plan, snap); err != nil {
			return err
		}
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

func (e *Engine) runPhase(stop, cancel context.Context, ph *phases.Phase, pp *PhasePlan, out *outputs, opts RunOptions) error {
	if pp.Complete && !pp.HasChanges() && !pp.rechecks() {
		return e.hooks.emit(Event{Kind: PhaseUpToDate, Phase: ph.Name})
	}
	pr, err := e.startPhase(ph, PhaseStarted)
	if err != nil {
		return err
	}
	planned := map[phases.Address]*StepPlan{}
	for _, sp := range pp.Steps {
		planned[sp.Addr] = sp
	}
	r := &stepRunner{e: e, stop: stop, cancel: cancel, out: out, opts: opts, planned: planned}

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
			if !r.run(c) && !r.wasStopped(c.Addr) {
				failedChecks = append(failedChecks, c.Addr)
			}
		}
	}
	runChecks(before)
	if err := r.fatal(); err != nil {
		return err
	}
	if len(failedChecks) > 0 {
		return pr.failed(&PhaseError{Phase: ph.Name, Checks: failedChecks})
	}

	w, err := pr.walk(stop, r, newStepGraph(ph.Steps), r.run)
	if err != nil {
		return err
	}
	for _, a := range w.skipped {
		if !r.emit(Event{Kind: StepSkipped, Phase: ph.Name, Addr: a, Message: "a step it depends on failed"}) {
			return r.fatal()
		}
	}
	if len(w.failed) > 0 {
		return pr.failed(&PhaseError{Phase: ph.Name, Failed: w.failed, Skipped: w.skipped})
	}
	if w.interrupted {
		return pr.interrupted()
	}
	runChecks(after)
	if err := r.fatal(); err != nil {
		return err
	}
	if len(failedChecks) > 0 {
		return pr.failed(&PhaseError{Phase: ph.Name, Checks: failedChecks})
	}
	if stop.Err() != nil {
		return pr.interrupted()
	}
	return pr.completed(PhaseCompleted)
}

// phaseRun is one phase being run or rolled back: the events that open
// and close it, and the walk of its steps, shared by both.
type phaseRun struct {
	e     *Engine
	name  string
	start time.Time
}

// startPhase announces the phase: kind is PhaseStarted, or
// PhaseRollbackStarted for a rollback.
func (e *Engine) startPhase(ph *phases.Phase, kind EventKind) (*phaseRun, error) {
	pr := &phaseRun{e: e, name: ph.Name, start: time.Now()}
	return pr, e.hooks.emit(Event{Kind: kind, Phase: ph.Name})
}

// walkOutcome sorts the steps of a walk by how they ended.
type walkOutcome struct {
	failed, skipped []phases.Address
	// interrupted: some step did not start, or did not finish waiting,
	// because the run was stopped.
	interrupted bool
}

// walk visits g's steps in parallel (see stepGraph.walk). Once a hook has
// failed (the state could not be written, a view could not show an
// event) no step starts, and the phase ends with the hook's error.
func (pr *phaseRun) walk(stop context.Context, r *stepRunner, g *stepGraph, visit func(*phases.Step) bool) (walkOutcome, error) {
	res := g.walk(stop, pr.e.parallelism, func(s *phases.Step) walkResult {
		switch {
		case r.fatal() == nil && visit(s):
			return succeeded
		case r.wasStopped(s.Addr):
			return stopped
		}
		return failed
	})
	if err := r.fatal(); err != nil {
		return walkOutcome{}, err
	}
	var w walkOutcome
	for i, x := range res {
		switch x {
		case failed:
			w.failed = append(w.failed, g.nodes[i].Addr)
		case skipped:
			w.skipped = append(w.skipped, g.nodes[i].Addr)
		case notStarted, stopped:
			w.interrupted = true
		}
	}
	w.interrupted = w.interrupted || stop.Err() != nil
	return w, nil
}

// failed reports the phase failed with err, and returns err, or the
// error of a hook that could not record it.
func (pr *phaseRun) failed(err error) error {
	if herr := pr.e.hooks.emit(Event{Kind: PhaseFailed, Phase: pr.name, Error: err.Error(), Duration: time.Since(pr.start)}); herr != nil {
		return herr
	}
	return err
}

// interrupted reports the phase stopped early.
func (pr *phaseRun) interrupted() error {
	if err := pr.e.hooks.emit(Event{Kind: Interrupted, Phase: pr.name}); err != nil {
		return err
	}
	return ErrInterrupted
}

// completed reports the phase done: kind is PhaseCompleted, or
// PhaseRolledBack for a rollback.
func (pr *phaseRun) completed(kind EventKind) error {
	return pr.e.hooks.emit(Event{Kind: kind, Phase: pr.name, Duration: time.Since(pr.start)})
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

	// stop is Run's gentle stop (stop.go), nil in a rollback.
	stop context.Context
	// stopped are the steps a gentle stop ended not done (under mu).
	stopped map[phases.Address]bool
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
	rec, ok := e.state.Step(s.Addr)
	if !ok {
		rec = &state.StepRecord{Addr: s.Addr, Phase: s.Phase, Check: s.IsCheck(), Status: state.Pending}
	}
	if _, going := e.goingWith(s.Addr, rec, e.stateLookup); going {
		return true // done, and going with the step that discards it
	}
	cfg, diags := r.out.evaluate(s)
	if diags.HasErrors() {
		return r.fail(s, rec, diags.Err())
	}
	// Its provider is configured now if it waited for step outputs: the
	// steps it waits for are dependencies of s, so they have run.
	p, provAfter, pd := e.use(r.cancel, s, r.out)
	if pd.HasErrors() {
		return r.fail(s, rec, e.redactDiags(pd).Err())
	}
	if p == nil {
		return r.fail(s, rec, providerNotReady(s, provAfter))
	}
	in := e.stepInputs(r.cancel, s, cfg)
	hash := in.hash
	sp := r.planned[s.Addr]
	if sp != nil && !in.asPlanned(sp.InputHash) {
		return r.fail(s, rec, fmt.Errorf("its inputs changed since the plan was made: make a new plan"))
	}

	// again: the plan took the step as done, but its record no longer
	// holds; it is planned anew just before it is applied.
	var again *replanned
	if !s.IsCheck() {
		if r.runningElsewhere(s, rec, StepFailed) {
			return false
		}
		switch rec.Status {
		case state.Done:
			again = filesRewritten(sp, in, rec)
			if (sp == nil || sp.Action == providers.NoOp) && in.matches(rec.InputHash) {
				if again = r.stillDone(s, p, cfg, rec, sp); again == nil {
					r.refreshOutputs(s, p, cfg, rec)
					return r.rehash(s, rec, in)
				}
			}
		case state.Running:
			// A run stopped while this step ran: ask what is there,
			// waiting for what it started, before doing it again.
			read := r.readInFlight(s, p, cfg, rec)
			if read.Observation == providers.Present && !read.Diagnostics.HasErrors() {
				return r.adopt(s, rec, cfg, hash, read)
			}
			if r.stop != nil && r.stop.Err() != nil {
				return r.leftInFlight(s)
			}
		}
	}

	if rec.Status == state.Reverted || rec.Status == state.Done {
		// Attempts count the tries of this run of the step: a step
		// applied anew, after a rollback or with new inputs, starts at 1.
		rec.Attempts = 0
	}
	planned, ok := r.plannedNow(s, p, cfg, rec, sp, again)
	if !ok {
		return false
	}
	return r.applyTries(s, p, cfg, rec, hash, planned)
}

// rehash writes again, keyed, the input hash of a done record that holds
// it in the old plain form (inputhash.go): once, by the first run that
// finds the step unchanged.
func (r *stepRunner) rehash(s *phases.Step, rec *state.StepRecord, in inputs) bool {
	if !in.stale(rec.InputHash) {
		return true
	}
	rec.InputHash = in.hash
	if err := r.e.state.Checkpoint(rec); err != nil {
		r.mu.Lock()
		if r.err == nil {
			r.err = fmt.Errorf("recording %s: %w", s.Addr, err)
		}
		r.mu.Unlock()
		return false
	}
	return true
}

// plannedNow is the provider's private plan to apply s with: the saved
// plan's, unless s is planned again now (its inputs were not known when
// the plan was made, or its record no longer holds: again).
func (r *stepRunner) plannedNow(s *phases.Step, p providers.Interface, cfg cty.Value, rec *state.StepRecord, sp *StepPlan, again *replanned) (json.RawMessage, bool) {
	switch {
	case again != nil:
		return r.planAgain(s, p, cfg, rec, again)
	case sp == nil:
		return nil, true
	case len(sp.KnownAfter) > 0 || sp.Deferred:
		return r.replan(s, p, cfg, rec, sp)
	}
	return sp.Planned, true
}

// applyTries applies s, trying again after a failure as its retry says,
// until it is done, has failed for good, or a stop ends it.
func (r *stepRunner) applyTries(s *phases.Step, p providers.Interface, cfg cty.Value, rec *state.StepRecord, hash string, planned json.RawMessage) bool {
	attempts := max(1, s.Retry.Attempts)
	backoff := s.Retry.Backoff
	for attempt := 1; ; attempt++ {
		rec.Attempts++
		// Facts such as who approved belong to the apply that made them:
		// a new try that fails must not show the earlier ones.
		rec.Facts = nil
		if !r.transition(s, rec, state.Running, Event{Kind: StepStarted, Attempt: attempt}) {
			return false
		}
		resp := r.apply(s, p, cfg, rec, planned)
		if !resp.Diagnostics.HasErrors() {
			return r.succeed(s, rec, hash, resp)
		}
		if resp.Revert != nil {
			// A failed apply that changed something and knows how to
			// undo it (an instance created, then not started): keep
			// that, so rollback can clean up.
			rec.Revert = resp.Revert
		}
		err := resp.Diagnostics.Err()
		if r.stoppedWaiting(s, p, resp) {
			return r.notDone(s, rec, err)
		}
		if attempt >= attempts || r.cancel.Err() != nil {
			return r.fail(s, rec, cutOff(r.cancel, err))
		}
		rec.LastError = err.Error()
		if !r.emit(Event{Kind: StepRetrying, Phase: s.Phase, Addr: s.Addr, Check: s.IsCheck(), Attempt: attempt, Error: rec.LastError, Message: fmt.Sprintf("retrying in %s", backoff)}) {
			return false
		}
		select {
		case <-time.After(backoff):
		case <-r.stopDone():
			return r.notDone(s, rec, stoppedBetweenAttempts(attempt, err))
		case <-r.cancel.Done():
			return r.fail(s, rec, r.cancel.Err())
		}
		backoff *= 2
	}
}

// transition is the one place a step's record changes status: it stamps
// the times, and the event that carries the record checkpoints it. A
// start (running, reverting) opens the step's times, anything else closes
// them.
func (r *stepRunner) transition(s *phases.Step, rec *state.StepRecord, status state.Status, ev Event) bool {
	now := time.Now()
	rec.Status = status
	switch status {
	case state.Running, state.Reverting:
		rec.StartedAt, rec.FinishedAt = &now, nil
	default:
		rec.FinishedAt = &now
		if rec.StartedAt != nil && (status == state.Done && ev.Kind == StepDone || status == state.Reverted) {
			ev.Duration = now.Sub(*rec.StartedAt)
		}
	}
	ev.Phase, ev.Addr, ev.Check, ev.Record = s.Phase, s.Addr, s.IsCheck(), rec
	return r.emit(ev)
}

// call runs one provider call for s (an Apply or a Revert) under the
// step's timeout, with a log writer whose lines become StepOutput events;
// the last line, unterminated, is flushed when the call returns. It
// returns the call's diagnostics, with a note when the timeout ended it.
func (r *stepRunner) call(s *phases.Step, do func(ctx context.Context, log io.Writer) phases.Diagnostics) phases.Diagnostics {
	ctx := r.cancel
	if s.Timeout > 0 {
		var done context.CancelFunc
		ctx, done = context.WithTimeout(ctx, s.Timeout)
		defer done()
	}
	lines := &lineWriter{emit: func(line string) {
		r.emit(Event{Kind: StepOutput, Phase: s.Phase, Addr: s.Addr, Check: s.IsCheck(), Message: line})
	}}
	// Bounded lines, whatever the provider writes: a longer one is cut
	// where no secret straddles the cut.
	log := secret.NewWriter(lines, r.e.hooks.redactor)
	diags := do(ctx, log)
	_ = log.Flush()
	lines.Flush()
	if ctx.Err() == context.DeadlineExceeded && diags.HasErrors() {
		diags = append(diags, phases.Errorf("Step timed out", "Step %s did not finish within its timeout of %s.", s.Addr, s.Timeout)...)
	}
	return diags
}

// replan plans again, now that its inputs are known, a step whose plan
// waited for steps of this run: the fresh diff is shown and logged (a
// StepPlanned event), and its provider's private plan is what Apply gets.
// With a saved plan, a fresh diff that contradicts what the saved one knew
// fails the step, naming the difference, before anything is applied.
func (r *stepRunner) replan(s *phases.Step, p providers.Interface, cfg cty.Value, rec *state.StepRecord, sp *StepPlan) (json.RawMessage, bool) {
	resp := p.Plan(r.cancel, providers.PlanRequest{Type: s.Addr.Type, Addr: s.Addr, Config: cfg, Prior: priorOf(rec), Action: sp.Action})
	if resp.Diagnostics.HasErrors() {
		return nil, r.fail(s, rec, withSubject(resp.Diagnostics, s.Range).Err())
	}
	diff := r.e.hooks.redactor.Text(resp.Diff)
	if r.opts.SavedPlan && !sp.Deferred {
		if line, bad := contradiction(sp.Diff, diff); bad {
			return nil, r.fail(s, rec, &StalePlanStepError{Addr: s.Addr, Saved: line, Fresh: diff})
		}
	}
	if !r.emit(Event{Kind: StepPlanned, Phase: s.Phase, Addr: s.Addr, Check: s.IsCheck(), Message: diff}) {
		return nil, false
	}
	return resp.Private, true
}

// StalePlanStepError says the plan of a step made just before applying it
// contradicts the saved plan being run.
type StalePlanStepError struct {
	Addr phases.Address
	// Saved is the line of the saved diff the fresh diff does not have.
	Saved string
	// Fresh is the fresh diff.
	Fresh string
}

func (e *StalePlanStepError) Error() string {
	fresh := strings.TrimSpace(e.Fresh)
	if fresh == "" {
		fresh = "(no diff)"
	}
	return fmt.Sprintf("the saved plan is stale for %s: it said %q, but planned again now that its inputs are known, it is:\n%s\nNothing was applied for %s: make a new plan",
		e.Addr, strings.TrimSpace(e.Saved), fresh, e.Addr)
}

func (r *stepRunner) apply(s *phases.Step, p providers.Interface, cfg cty.Value, rec *state.StepRecord, planned json.RawMessage) providers.ApplyResponse {
	req := providers.ApplyRequest{
		Type: s.Addr.Type, Addr: s.Addr, Config: cfg, Prior: priorOf(rec),
		Approval: providers.Approval{Prompt: r.opts.Prompt}, Planned: planned,
		Stop: r.stopDone(),
	}
	if r.opts.Approve[s.Addr] {
		req.Approval.By = r.opts.Approver
	}
	req.Intent = func(inv providers.RevertData) error {
		rec.Revert = &inv // a failed or killed apply keeps it (applyTries, needsRevert)
		return r.e.state.Checkpoint(rec)
	}
	var resp providers.ApplyResponse
	resp.Diagnostics = r.call(s, func(ctx context.Context, log io.Writer) phases.Diagnostics {
		req.Log = log
		ctx, release := r.gentle(ctx, s, p)
		defer release()
		resp = p.Apply(ctx, req)
		if resp.Stopped && !resp.Diagnostics.HasErrors() {
			resp.Diagnostics = append(resp.Diagnostics, phases.Errorf("Stopped While Waiting", "%s stopped waiting at the interrupt without saying what it did not wait for.", s.Addr)...)
		}
		return resp.Diagnostics
	})
	return resp
}

func (r *stepRunner) succeed(s *phases.Step, rec *state.StepRecord, hash string, resp providers.ApplyResponse) bool {
	r.e.hooks.redactor.AddMarked(resp.Outputs)
	enc, err := encodeOutputs(resp.Outputs)
	if err != nil {
		return r.fail(s, rec, fmt.Errorf("recording outputs: %w", err))
	}
	rec.InputHash = hash
	rec.Outputs = enc
	rec.Private = resp.Private
	rec.Revert = resp.Revert
	rec.Facts = resp.Facts
	rec.Identity = resp.Identity
	rec.Upstream = upstreamWorlds(s, r.e.stateLookup)
	rec.LastError = ""
	if !r.rebase(s) || !r.transition(s, rec, state.Done, Event{Kind: StepDone}) {
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
	rec.InputHash = hash
	rec.Outputs = enc
	if read.Revert != nil {
		rec.Revert = read.Revert
	}
	rec.Identity = read.Identity
	rec.Upstream = upstreamWorlds(s, r.e.stateLookup)
	rec.LastError = ""
	if !r.rebase(s) || !r.transition(s, rec, state.Done, Event{Kind: StepAdopted, Message: "finished before the last run stopped; recorded without running it again"}) {
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
	// Outputs of an earlier apply no longer describe the step (a refused
	// approval is not approved by anyone); nothing reads a failed step's.
	rec.Outputs = nil
	rec.LastError = err.Error()
	r.transition(s, rec, state.Failed, Event{Kind: StepFailed, Error: rec.LastError})
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
