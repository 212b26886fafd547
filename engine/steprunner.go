package engine

import (
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

// stepRunner runs single steps; it is shared by the goroutines of a walk.
type stepRunner struct {
	e       *Engine
	cancel  context.Context
	out     *outputs
	opts    RunOptions
	planned map[phases.Address]*StepPlan

	mu  sync.Mutex
	err error // a hook (the state) failed: the run must stop

	// stop is Run's gentle stop (see gentle), nil in a rollback.
	stop context.Context
	// stopped are the steps a gentle stop ended not done.
	stopped sync.Map // phases.Address -> true
}

func (r *stepRunner) fatal() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// emit sends an event; a failing hook makes the whole run stop.
func (r *stepRunner) emit(ev Event) bool {
	return r.recorded(ev.Addr, r.e.hooks.emit(ev))
}

// checkpoint writes rec; a failure makes the whole run stop.
func (r *stepRunner) checkpoint(rec *state.StepRecord) bool {
	return r.recorded(rec.Addr, r.e.state.Checkpoint(rec))
}

// recorded keeps err, the first failure to record a, as the run's.
func (r *stepRunner) recorded(a phases.Address, err error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("recording %s: %w", a, err)
	}
	return err == nil
}

// run brings one step (or check) to done, reporting whether it is. Just
// before a step is applied or passed over, decide says again what it
// does: the in-flight read of a step a stopped run left running, the
// re-read of a step passed over and the saved plan's check all go by
// that one fresh decision.
func (r *stepRunner) run(s *phases.Step) bool {
	if r.fatal() != nil {
		return false
	}
	e := r.e
	rec, ok := e.state.Step(s.Addr)
	if !ok {
		rec = &state.StepRecord{Addr: s.Addr, Phase: s.Phase, Check: s.IsCheck(), Status: state.Pending}
	}
	sp := r.planned[s.Addr]
	f := e.recordFacts(s, e.stateLookup(s.Addr), e.stateLookup)
	f.Run = true
	if sp != nil {
		f.Planned, f.Recheck = &Decision{Action: sp.Action, Reason: sp.ReasonCode, Why: sp.Why}, sp.Recheck
	}
	if f.GoingWith != nil {
		return true // done, and going with the step that discards it
	}
	// Its provider is configured now if it waited for step outputs: the
	// steps it waits for are dependencies of s, so they have run.
	g := e.inputFacts(r.cancel, s, r.out, &f)
	switch {
	case f.InputsInvalid:
		return r.fail(s, rec, g.diags.Err())
	case f.ProviderFailed:
		return r.fail(s, rec, e.redactDiags(g.diags).Err())
	case f.ProviderWaits != nil:
		return r.fail(s, rec, providerNotReady(s, f.ProviderWaits))
	case sp != nil && !g.in.asPlanned(sp.InputHash):
		return r.fail(s, rec, fmt.Errorf("its inputs changed since the plan was made: make a new plan"))
	}
	var d Decision
	if !s.IsCheck() {
		if r.runningElsewhere(s, rec, StepFailed) {
			return false
		}
		for d = decide(f); d.Needs&(NeedRead|NeedReadInFlight) != 0; d = decide(f) {
			if d.Needs&NeedReadInFlight != 0 {
				read := r.readInFlight(s, g.p, g.cfg, rec)
				f.Read = &read
			} else {
				g.read(r.cancel, s, rec, &f)
			}
		}
		switch {
		case d.Reason == InFlight && d.Action == providers.NoOp:
			return r.adopt(s, rec, g.in.hash, *f.Read)
		case d.Reason == InFlight && r.stop != nil && r.stop.Err() != nil:
			return r.leftInFlight(s)
		case d.Action == providers.NoOp && rec.Status == state.Done:
			r.refreshOutputs(s, g.p, g.cfg, rec)
			return r.rehash(s, rec, g.in)
		case r.opts.SavedPlan && sp != nil && plannedAgain(sp) && !admits(sp, d):
			return r.fail(s, rec, fmt.Errorf("the saved plan is stale for %s: it decided %s (%s), decided again now it is %s (%s); nothing was applied for %s: make a new plan",
				s.Addr, sp.Action, sp.ReasonCode, d.Action, d.Reason, s.Addr))
		}
	}
	// again: the plan took the step as done, but its record no longer
	// holds; it is planned anew just before it is applied.
	var again *Decision
	if rec.Status == state.Done && (sp == nil || sp.Action == providers.NoOp) && (f.Matches || filesRewritten(sp)) {
		again = &d
	}
	if rec.Status == state.Reverted || rec.Status == state.Done {
		// Attempts count the tries of this run of the step: a step
		// applied anew, after a rollback or with new inputs, starts at 1.
		rec.Attempts = 0
	}
	planned, ok := r.privatePlan(s, g.p, g.cfg, rec, sp, again)
	if !ok {
		return false
	}
	return r.applyTries(s, g.p, g.cfg, rec, g.in.hash, planned)
}

// rehash writes again a done record an older migrate wrote, once, by the
// first run that finds the step unchanged: its input hash keyed when it
// holds it in the old plain form (inputhash.go), and the provider that
// ran it when it does not name one (format 3), so that it can be undone
// once the runbook no longer has the step (removedStep).
func (r *stepRunner) rehash(s *phases.Step, rec *state.StepRecord, in inputs) bool {
	stale := in.stale(rec.InputHash)
	if !stale && rec.Provider != "" {
		return true
	}
	if stale {
		rec.InputHash = in.hash
	}
	rec.Provider = s.Provider
	return r.checkpoint(rec)
}

// privatePlan is the provider's private plan to apply s with: the saved
// plan's, unless s is planned again now, just before it is applied: its
// plan waited for steps of this run (its inputs are known now), or the
// plan took it as done and its record no longer holds (again). The
// fresh diff, and why, go out as a StepPlanned event, and its provider's
// private plan is what Apply gets. With a saved plan, a value the saved
// one knew that differs now fails the step, naming its path, before
// anything is applied. A record about a world since replaced is
// forgotten first (its outputs, private data, revert data and identity
// described the thing before): the step is applied as if it had never
// run, its provider given no prior (the talos provider refuses a node it
// installed that answers in maintenance mode, and the node here is a new
// one).
func (r *stepRunner) privatePlan(s *phases.Step, p providers.Interface, cfg cty.Value, rec *state.StepRecord, sp *StepPlan, again *Decision) (json.RawMessage, bool) {
	switch {
	case again == nil && sp == nil:
		return nil, true
	case again == nil && !plannedAgain(sp):
		return sp.Planned, true
	}
	ev := Event{Kind: StepPlanned, Phase: s.Phase, Addr: s.Addr, Check: s.IsCheck()}
	action := providers.NoOp
	if again == nil {
		action = sp.Action
	} else {
		why := again.Why
		why.Detail = r.e.hooks.redactor.Text(why.Detail)
		action, ev.ReasonCode, ev.Why = again.Action, again.Reason, &why
		if action == providers.Create {
			rec.Outputs, rec.Private, rec.Revert, rec.Identity, rec.Upstream = nil, nil, nil, "", nil
			rec.Status, rec.Attempts = state.Pending, 0
		}
	}
	resp := p.Plan(r.cancel, providers.PlanRequest{Type: s.Addr.Type, Addr: s.Addr, Config: cfg, Prior: priorOf(rec), Action: action})
	if resp.Diagnostics.HasErrors() {
		return nil, r.fail(s, rec, withSubject(resp.Diagnostics, s.Range).Err())
	}
	if again == nil && r.opts.SavedPlan {
		if err := r.e.checkPlannedValues(s.Addr, sp.PlannedValues, cfg, resp.Outputs); err != nil {
			return nil, r.fail(s, rec, err)
		}
	}
	ev.Message = r.e.hooks.redactor.Text(resp.Diff)
	return resp.Private, r.emit(ev)
}

// applyTries applies s, trying again after a failure as its retry says,
// until it is done, has failed for good, or a stop ends it.
func (r *stepRunner) applyTries(s *phases.Step, p providers.Interface, cfg cty.Value, rec *state.StepRecord, hash string, planned json.RawMessage) bool {
	attempts := max(1, s.Retry.Attempts)
	backoff := s.Retry.Backoff
	for attempt := 1; ; attempt++ {
		rec.Attempts++
		// Facts such as who approved belong to the apply that made them:
		// a new try that fails must not show the earlier ones. A
		// service's window's ends are kept (windows.go).
		kept := r.e.keptFacts(s, rec, time.Now())
		rec.Facts = kept
		if !r.transition(s, rec, state.Running, Event{Kind: StepStarted, Attempt: attempt}) {
			return false
		}
		resp := r.apply(s, p, cfg, rec, planned)
		if !resp.Diagnostics.HasErrors() {
			resp.Facts = r.e.withKept(s, resp.Facts, kept, time.Now())
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
	if !s.IsCheck() {
		rec.Provider = s.Provider // who undoes it once the runbook no longer has it
	}
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
	enc, err := encodeOutputs(resp.Outputs)
	if err != nil {
		return r.fail(s, rec, fmt.Errorf("recording outputs: %w", err))
	}
	rec.Private, rec.Revert, rec.Facts = resp.Private, resp.Revert, resp.Facts
	return r.done(s, rec, hash, enc, resp.Identity, resp.Outputs, Event{Kind: StepDone})
}

// adopt records a step that finished before the last run could say so.
func (r *stepRunner) adopt(s *phases.Step, rec *state.StepRecord, hash string, read providers.ReadResponse) bool {
	enc, _ := encodeOutputs(read.Outputs)
	if read.Revert != nil {
		rec.Revert = read.Revert
	}
	return r.done(s, rec, hash, enc, read.Identity, read.Outputs, Event{Kind: StepAdopted, Message: "finished before the last run stopped; recorded without running it again"})
}

// done records s done, with what its apply or a read said of it, once
// the steps it rebases are read again; the steps after it see outputs.
func (r *stepRunner) done(s *phases.Step, rec *state.StepRecord, hash string, enc json.RawMessage, identity string, outputs cty.Value, ev Event) bool {
	r.e.hooks.redactor.AddMarked(outputs)
	rec.InputHash, rec.Outputs, rec.Identity, rec.LastError = hash, enc, identity, ""
	rec.Upstream = upstreamWorlds(s, r.e.stateLookup)
	if !r.rebase(s) || !r.transition(s, rec, state.Done, ev) {
		return false
	}
	if outputs != cty.NilVal && !outputs.IsNull() {
		r.out.set(s.Addr, outputs)
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

// A gentle stop (the first Ctrl-C, SIGTERM or SIGHUP: Run's stop) starts
// no new step, and lets the running steps that make an effect finish
// making it. What only waits does not go on waiting:
//
//   - a step that only waits or reads (a check, or a step type declared
//     phases.StepType.WaitsOnly: a pause, a readiness poll, an approval)
//     has its context cancelled at once;
//   - a step whose effect is made and that only waits now (an instance
//     started, waiting for its address) learns it from ApplyRequest.Stop
//     and answers Stopped;
//   - a step between two attempts does not try again.
//
// Such a step is recorded as pending — not done, and not failed: nothing
// went wrong, it was not finished — with the message saying what was not
// waited for as its last error, and the Revert of what its apply did, so
// that rollback still undoes it. The run ends with ErrInterrupted, and the
// next run does the step again: its apply finds the effect made and only
// waits.

// errStopped is the cause of the context of a step that only waits,
// cancelled by a gentle stop.
var errStopped = errors.New("the first interrupt stops a step that only waits")

// stopDone is closed at a gentle stop; nil (never) in a rollback, whose
// reverts all finish.
func (r *stepRunner) stopDone() <-chan struct{} {
	if r.stop == nil {
		return nil
	}
	return r.stop.Done()
}

// waitsOnly: s has no effect of its own, so a gentle stop ends it.
func waitsOnly(s *phases.Step, p providers.Interface) bool {
	return s.IsCheck() || p.Schema().StepTypes[s.Addr.Type].WaitsOnly
}

// gentle returns the context an Apply of s runs under: ctx, and for a
// step that only waits, ended by a gentle stop too. Call release when the
// Apply returned.
func (r *stepRunner) gentle(ctx context.Context, s *phases.Step, p providers.Interface) (_ context.Context, release func()) {
	if r.stop == nil || !waitsOnly(s, p) {
		return ctx, func() {}
	}
	return r.stoppable(ctx)
}

// stoppable is ctx, ended by a gentle stop too. Call release when done.
func (r *stepRunner) stoppable(ctx context.Context) (_ context.Context, release func()) {
	if r.stop == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	unhook := context.AfterFunc(r.stop, func() { cancel(errStopped) })
	return ctx, func() { unhook(); cancel(nil) }
}

// stoppedWaiting says whether a failed apply of s ended because of a
// gentle stop while it only waited: its provider says so (Stopped), or s
// only waits and the stop came. A failure of such a step then says
// nothing about what it waits for; the next run asks again.
func (r *stepRunner) stoppedWaiting(s *phases.Step, p providers.Interface, resp providers.ApplyResponse) bool {
	if r.stop == nil || r.stop.Err() == nil {
		return false
	}
	return resp.Stopped || waitsOnly(s, p)
}

// notDone records s as not done after a gentle stop ended it (see the
// top of this file): pending, why as its last error, its revert data kept.
func (r *stepRunner) notDone(s *phases.Step, rec *state.StepRecord, why error) bool {
	rec.Outputs = nil
	rec.LastError = why.Error()
	r.stopped.Store(s.Addr, true)
	r.transition(s, rec, state.Pending, Event{Kind: StepStopped, Error: rec.LastError,
		Message: "not done: stopped while it waited; the next run does it again"})
	return false
}

// wasStopped: s ended not done at a gentle stop, which is no failure.
func (r *stepRunner) wasStopped(a phases.Address) bool {
	_, ok := r.stopped.Load(a)
	return ok
}

// stoppedBetweenAttempts is why a step that failed an attempt and was
// stopped before the next is not done.
func stoppedBetweenAttempts(attempt int, last error) error {
	return fmt.Errorf("stopped before attempt %d (it waited to try again); attempt %d had failed: %w", attempt+1, attempt, last)
}

// readInFlight reads a step a stopped run left running, waiting (in its
// provider) for what that run started; a gentle stop ends the wait, which
// changes nothing.
func (r *stepRunner) readInFlight(s *phases.Step, p providers.Interface, cfg cty.Value, rec *state.StepRecord) providers.ReadResponse {
	ctx, release := r.stoppable(r.cancel)
	defer release()
	return p.Read(ctx, providers.ReadRequest{Type: s.Addr.Type, Addr: s.Addr, Config: cfg, Prior: priorOf(rec), InFlight: true})
}

// leftInFlight ends a step whose in-flight read a gentle stop cut short:
// its record stays running, so that the next run reads it again, and
// waits, before doing anything.
func (r *stepRunner) leftInFlight(s *phases.Step) bool {
	r.stopped.Store(s.Addr, true)
	r.emit(Event{Kind: StepStopped, Phase: s.Phase, Addr: s.Addr, Check: s.IsCheck(),
		Message: "not done: stopped while it waited for what the last run started; the next run reads it again"})
	return false
}

// A step recorded running (or reverting) was started by a lock holder
// that may still be at it: a run on another machine whose lease on a
// shared state still lives. Doing it again now would do it twice at
// once, so such a step is refused, its record left as that holder wrote
// it; once that holder is provably gone, the in-flight read (readInFlight)
// applies as after any stopped run.

// runningElsewhere refuses s when its record, running or reverting, says
// another holder that may still be alive started it, reporting failed
// with kind (its record unchanged: it is not this run's to write).
func (r *stepRunner) runningElsewhere(s *phases.Step, rec *state.StepRecord, kind EventKind) bool {
	if rec.Status != state.Running && rec.Status != state.Reverting {
		return false
	}
	err := state.RunningElsewhere(r.cancel, r.e.state, rec)
	if err == nil {
		return false
	}
	r.emit(Event{Kind: kind, Phase: s.Phase, Addr: s.Addr, Check: s.IsCheck(), Error: err.Error()})
	return true
}

// cutOff is what the record of a step whose apply the run cancelled (a
// second interrupt, a lost state lock) says: why it was cut off, then
// what the apply answered.
func cutOff(cancel context.Context, err error) error {
	if cancel.Err() == nil {
		return err
	}
	return fmt.Errorf("cut off: %v: %w", context.Cause(cancel), err)
}

// rebase reads again, before s is recorded as done, each step s depends
// on whose type says Rebase (phases.StepType.Rebase): s may have changed
// its effect on purpose (a restore Job unpacks and chowns what a copy
// put there), and what its provider finds now becomes that step's
// record, so that the next plan calls drift only a change from outside
// the runbook. It runs before s's own checkpoint: a kill in between
// leaves s running, and its resumed run rebases again.
func (r *stepRunner) rebase(s *phases.Step) bool {
	if s.IsCheck() {
		return true // a check only reads
	}
	for _, d := range s.DependsOn {
		ds := r.e.steps[d]
		if ds == nil || ds.IsCheck() || !r.e.rebases(ds) {
			continue
		}
		rec, ok := r.e.state.Step(d)
		if !ok || rec.Status != state.Done {
			continue
		}
		g := r.e.inputFacts(r.cancel, ds, r.out, &stepFacts{})
		if g.p == nil {
			continue
		}
		read := g.p.Read(r.cancel, providers.ReadRequest{Type: d.Type, Addr: d, Config: g.cfg, Prior: priorOf(rec), Rebase: true})
		if read.Diagnostics.HasErrors() {
			// Not observed: the record stays as it was, and the next
			// plan may call drift what s did (it says what differs).
			r.emit(Event{Kind: StepOutput, Phase: s.Phase, Addr: s.Addr, Message: fmt.Sprintf("could not read %s again after this step ran: %s", d, r.e.redactDiags(read.Diagnostics).Err())})
			continue
		}
		if read.Private == nil {
			continue // nothing new to keep
		}
		if rec.Private = read.Private; !r.checkpoint(rec) {
			return false
		}
	}
	return true
}

// revert undoes one step with the revert data its record holds.
func (r *stepRunner) revert(s *phases.Step) bool {
	e := r.e
	rec, ok := e.state.Step(s.Addr)
	if !ok || !needsRevert(rec) {
		return true
	}
	if r.runningElsewhere(s, rec, StepRevertFailed) {
		return false
	}
	if _, gone := e.discarders(s.Addr, e.stateLookup); gone != nil {
		// Its effects went with the step that discarded them (the VM it
		// was made in): no provider is asked, its host may be gone too.
		return r.reverted(s, rec, decide(stepFacts{Rollback: true, Rec: rec, GoneWith: gone}))
	}
	p, provAfter, pd := e.use(r.cancel, s, r.out)
	if pd.HasErrors() {
		return r.revertFailed(s, rec, e.redactDiags(pd).Err())
	}
	if p == nil {
		return r.revertFailed(s, rec, providerNotReady(s, provAfter))
	}
	cfg, _, diags := r.out.evaluateAfter(s)
	if diags.HasErrors() {
		// The runbook may have changed since; the revert data is what counts.
		cfg = cty.DynamicVal
	}
	// A rollback stopped here. That the step's own effect is gone says
	// nothing of whether its revert finished (it may remove that first and
	// more after): the revert runs again, told so, and the provider may
	// observe its completion.
	resumed := rec.Status == state.Reverting || rec.Status == state.RevertFailed
	rv, ok := p.(providers.Reverter)
	if !ok || rec.Revert == nil {
		return r.revertFailed(s, rec, fmt.Errorf("provider %s cannot undo steps", s.Provider))
	}
	if !r.transition(s, rec, state.Reverting, Event{Kind: StepReverting, Message: rec.Revert.Description}) {
		return false
	}
	outputs, _, _ := decodeOutputs(rec.Outputs)
	req := providers.RevertRequest{Type: s.Addr.Type, Addr: s.Addr, Config: cfg, Revert: *rec.Revert, Outputs: outputs, Resumed: resumed}
	diags = r.call(s, func(ctx context.Context, log io.Writer) phases.Diagnostics {
		req.Log = log
		return rv.Revert(ctx, req).Diagnostics
	})
	if diags.HasErrors() {
		return r.revertFailed(s, rec, diags.Err())
	}
	return r.reverted(s, rec, Decision{})
}

func (r *stepRunner) reverted(s *phases.Step, rec *state.StepRecord, d Decision) bool {
	rec.Revert = nil
	rec.Outputs = nil
	rec.InputHash = ""
	rec.LastError = ""
	if !r.transition(s, rec, state.Reverted, Event{Kind: StepReverted, ReasonCode: d.Reason, Why: whyOf(d)}) {
		return false
	}
	r.out.set(s.Addr, cty.DynamicVal)
	return true
}

func (r *stepRunner) revertFailed(s *phases.Step, rec *state.StepRecord, err error) bool {
	rec.LastError = err.Error()
	r.transition(s, rec, state.RevertFailed, Event{Kind: StepRevertFailed, Error: strings.TrimSpace(rec.LastError)})
	return false
}

// providerNotReady is the error of a step about to run whose provider
// still waits for step outputs (the steps it needs did not run).
func providerNotReady(s *phases.Step, after []phases.Address) error {
	return fmt.Errorf("its provider %s cannot be configured: its block uses outputs of %s, not known yet", s.Provider, joinAddrs(after))
}
