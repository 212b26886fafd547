package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
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
	// Records go to their steps' new addresses before any step runs.
	if err := e.applyMoves(plan.Moved); err != nil {
		return err
	}
	// Records the runbook's removed blocks let go lose their revert data.
	if err := e.applyForgets(plan.LetGo); err != nil {
		return err
	}
	snap = e.state.Snapshot()
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

	// An after check that depends on steps of the phase runs in the walk,
	// as soon as they are done; the others after the walk.
	var early []*phases.Step
	isEarly := map[phases.Address]bool{}
	for _, c := range ph.Checks {
		if len(ph.WaitsFor(c)) > 0 {
			early, isEarly[c.Addr] = append(early, c), true
		}
	}
	unchangedCheck := func(c *phases.Step) bool {
		sp := planned[c.Addr]
		return sp != nil && sp.Action == providers.NoOp
	}
	// runChecks runs the checks before the steps, or those after them
	// that did not run in the walk; failedChecks holds the walk's.
	var failedChecks []phases.Address
	runChecks := func(before bool) error {
		for _, c := range ph.Checks {
			if (c.When == phases.CheckBefore) != before || unchangedCheck(c) || !before && isEarly[c.Addr] {
				continue
			}
			if stop.Err() != nil {
				break
			}
			if !r.run(c) && !r.wasStopped(c.Addr) {
				failedChecks = append(failedChecks, c.Addr)
			}
		}
		if err := r.fatal(); err != nil {
			return err
		}
		if len(failedChecks) > 0 {
			return pr.failed(&PhaseError{Phase: ph.Name, Checks: failedChecks})
		}
		return nil
	}
	if err := runChecks(true); err != nil {
		return err
	}
	if err := e.revertRemoved(pr, r, ph); err != nil {
		return err
	}

	w, err := pr.walk(stop, r, newStepGraph(slices.Concat(ph.Steps, early)), func(s *phases.Step) bool {
		return s.IsCheck() && unchangedCheck(s) || r.run(s)
	})
	if err != nil {
		return err
	}
	for _, a := range w.skipped {
		if !r.emit(Event{Kind: StepSkipped, Phase: ph.Name, Addr: a, Message: "a step it depends on failed"}) {
			return r.fatal()
		}
	}
	var failedSteps []phases.Address
	for _, a := range w.failed {
		if isEarly[a] {
			failedChecks = append(failedChecks, a)
		} else {
			failedSteps = append(failedSteps, a)
		}
	}
	if len(failedSteps) > 0 {
		return pr.failed(&PhaseError{Phase: ph.Name, Failed: failedSteps, Skipped: w.skipped, Checks: failedChecks})
	}
	if w.interrupted {
		return pr.interrupted()
	}
	if err := runChecks(false); err != nil {
		return err
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

// lineWriter turns a step's output into one event per line.
type lineWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	emit func(string)
}

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
