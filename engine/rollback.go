package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// RollbackPlan lists what a rollback will undo, phase by phase from the
// last, and what it cannot undo. It is shown before anything is done.
type RollbackPlan struct {
	Lineage string               `json:"lineage"`
	Serial  uint64               `json:"serial"`
	Phases  []*PhaseRollbackPlan `json:"phases"`
	// Programs are the provider programs the rollback may start, checked.
	Programs []providers.Program `json:"programs,omitempty"`
	// Moved are the records the runbook's moved blocks carry to their
	// steps' new addresses: the rollback makes them first (moved.go).
	Moved []Move `json:"moved,omitempty"`
	// LetGo are the records removed blocks with revert = false let go:
	// the rollback writes that first, and does not undo them (forget.go).
	LetGo []Forget `json:"let_go,omitempty"`
}

// PhaseRollbackPlan is the rollback of one phase.
type PhaseRollbackPlan struct {
	Name string `json:"name"`
	// Revert lists the steps to undo, in the order they will be undone
	// when run one at a time.
	Revert []RevertEntry `json:"revert"`
	// Irreversible steps are done but recorded no way to undo them; they
	// stay as they are.
	Irreversible []phases.Address `json:"irreversible,omitempty"`
}

// RevertEntry is one step to undo.
type RevertEntry struct {
	Addr        phases.Address `json:"address"`
	Description string         `json:"description"`
	// Changed says what was changed outside migrate since the step ran,
	// which undoing it discards too (see NoteChanges).
	Changed string `json:"changed_outside,omitempty"`
	// GoneWith, when set, is the done step that discarded this one's
	// effects (phases.Step.Discards): nothing is left to undo, and the
	// rollback only records it as reverted.
	GoneWith *phases.Address `json:"gone_with,omitempty"`
	// ReasonCode says why (revert_data, nothing_to_undo); Why names
	// the step it went with.
	ReasonCode ReasonCode `json:"reason_code"`
	Why        Why        `json:"why,omitzero"`
}

// HasChanges reports whether the rollback would undo anything.
func (p *RollbackPlan) HasChanges() bool {
	return slices.ContainsFunc(p.Phases, func(ph *PhaseRollbackPlan) bool { return len(ph.Revert) > 0 })
}

// Irreversible lists every step the rollback cannot undo.
func (p *RollbackPlan) Irreversible() []phases.Address {
	var out []phases.Address
	for _, ph := range p.Phases {
		out = append(out, ph.Irreversible...)
	}
	return out
}

// PlanRollback says what rolling back the named phases (all when empty)
// would do. Later phases that depend on them must be rolled back first,
// or in the same rollback.
func (e *Engine) PlanRollback(names []string) (*RollbackPlan, error) {
	selected, err := e.selectPhases(names)
	if err != nil {
		return nil, err
	}
	snap := e.state.Snapshot()
	lineage, serial := snap.Lineage, snap.Serial
	snap, moved, diags := e.moves(snap)
	if diags.HasErrors() {
		return nil, diags.Err()
	}
	chosen := map[string]bool{}
	for _, ph := range selected {
		chosen[ph.Name] = true
	}
	for _, later := range e.phaseOrder {
		if chosen[later.Name] {
			continue
		}
		before := e.order.Before(later)
		i := slices.IndexFunc(before, func(b *phases.Phase) bool { return chosen[b.Name] })
		if i >= 0 && phaseTouched(e.withRemoved(later, snap), snap) {
			return nil, fmt.Errorf("phase %s runs after %s and has not been rolled back: roll back %s first, or both together", later.Name, before[i].Name, later.Name)
		}
	}
	rp := &RollbackPlan{Lineage: lineage, Serial: serial, Moved: moved, LetGo: e.forgets(snap)}
	progs, diags := e.programs(selected, snap)
	if diags.HasErrors() {
		return nil, diags.Err()
	}
	rp.Programs = progs
	for i := len(selected) - 1; i >= 0; i-- {
		ph := selected[i]
		pr := &PhaseRollbackPlan{Name: ph.Name}
		_, left := e.removed(ph, snap)
		for _, l := range left {
			pr.Irreversible = append(pr.Irreversible, l.Addr) // no provider configured now may undo it
		}
		order := newStepGraph(e.withRemoved(ph, snap)).order()
		for j := len(order) - 1; j >= 0; j-- {
			s := order[j]
			rec := snap.Steps[s.Addr.String()]
			_, gone := e.discarders(s.Addr, snapshotLookup(snap))
			switch d := decide(stepFacts{Rollback: true, Rec: rec, GoneWith: gone}); d.Reason {
			case RevertData:
				pr.Revert = append(pr.Revert, RevertEntry{Addr: s.Addr, Description: d.Why.Detail, ReasonCode: d.Reason})
			case NothingToUndo:
				pr.Revert = append(pr.Revert, RevertEntry{Addr: s.Addr, GoneWith: gone, ReasonCode: d.Reason, Why: d.Why,
					Description: "nothing to undo: it went with " + gone.String()})
			case Irreversible:
				pr.Irreversible = append(pr.Irreversible, s.Addr)
			}
		}
		rp.Phases = append(rp.Phases, pr)
	}
	return rp, nil
}

// phaseTouched: some step of a phase (its steps and those it has still
// to undo whose key or group call instance left the map: withRemoved)
// is done or part-done.
func phaseTouched(steps []*phases.Step, snap *state.Snapshot) bool {
	return slices.ContainsFunc(steps, func(s *phases.Step) bool { return needsRevert(snap.Steps[s.Addr.String()]) })
}

// Rollback undoes the plan's steps, phase by phase from the last, each
// phase's steps in reverse dependency order (in parallel where they are
// independent). Every transition is checkpointed, so a rollback that stops
// resumes where it stopped.
func (e *Engine) Rollback(stop, cancel context.Context, rp *RollbackPlan) error {
	snap := e.state.Snapshot()
	if rp.Serial != snap.Serial || rp.Lineage != snap.Lineage {
		return &StaleError{PlanLineage: rp.Lineage, StateLineage: snap.Lineage, PlanSerial: rp.Serial, StateSerial: snap.Serial}
	}
	e.hooks.logValue("rollback plan", rp)
	// Records go to their steps' new addresses first: the steps are
	// undone under the names the runbook gives them now.
	if err := e.applyMoves(rp.Moved); err != nil {
		return err
	}
	// What removed blocks let go is not undone: it says so first.
	if err := e.applyForgets(rp.LetGo); err != nil {
		return err
	}
	snap = e.state.Snapshot()
	out := e.loadOutputs(snap)
	for _, pr := range rp.Phases {
		ph := e.runbook.Phase(pr.Name)
		if ph == nil {
			return fmt.Errorf("the rollback names phase %q, which the runbook no longer has", pr.Name)
		}
		if stop.Err() != nil {
			return ErrInterrupted
		}
		if err := e.rollbackPhase(stop, cancel, ph, pr, out); err != nil {
			return err
		}
	}
	return nil
}

func (e *Engine) rollbackPhase(stop, cancel context.Context, ph *phases.Phase, pr *PhaseRollbackPlan, out *outputs) error {
	run, err := e.startPhase(ph, PhaseRollbackStarted)
	if err != nil {
		return err
	}
	wanted := map[phases.Address]bool{}
	for _, x := range pr.Revert {
		wanted[x.Addr] = true
	}
	r := &stepRunner{e: e, cancel: cancel, out: out}
	w, err := run.walk(stop, r, newStepGraph(e.withRemoved(ph, e.state.Snapshot())).reversed(), func(s *phases.Step) bool {
		if !wanted[s.Addr] {
			return true
		}
		return r.revert(s)
	})
	if err != nil {
		return err
	}
	if len(w.failed) > 0 {
		err := fmt.Errorf("rollback of phase %s did not complete: could not undo %s", ph.Name, joinAddrs(w.failed))
		if len(w.skipped) > 0 {
			err = fmt.Errorf("%w; left as they are because a step that depends on them could not be undone: %s", err, joinAddrs(w.skipped))
		}
		return run.failed(err)
	}
	if w.interrupted {
		return run.interrupted()
	}
	// The phase no longer counts as complete: its after-checks are void.
	for _, c := range ph.Checks {
		rec, ok := e.state.Step(c.Addr)
		if !ok || rec.Status == state.Reverted {
			continue
		}
		rec.Status = state.Reverted
		if !r.emit(Event{Kind: StepReverted, Phase: ph.Name, Addr: c.Addr, Check: true, Record: rec}) {
			return r.fatal()
		}
	}
	return run.completed(PhaseRolledBack)
}

// NoteChanges asks the provider of every done step the rollback plan undoes
// what is there now (Read) and notes, in the entry, a change made outside
// migrate since the step ran: undoing the step discards that change too (a
// release upgraded by hand is uninstalled with it), and the person asked to
// confirm must know it first. A step that cannot be read gets no note.
func (e *Engine) NoteChanges(ctx context.Context, rp *RollbackPlan) {
	snap := e.movedSnapshot(e.state.Snapshot())
	out := e.loadOutputs(snap)
	for _, ph := range rp.Phases {
		for i := range ph.Revert {
			x := &ph.Revert[i]
			s, rec := e.steps[x.Addr], snap.Steps[x.Addr.String()]
			if s == nil || rec == nil || rec.Status != state.Done {
				continue
			}
			f := stepFacts{Rec: rec}
			g := e.inputFacts(ctx, s, out, &f)
			if g.p == nil {
				continue
			}
			read := g.read(ctx, s, rec, &f)
			if read.Observation == providers.Drifted && !read.Diagnostics.HasErrors() && read.Detail != "" {
				x.Changed = e.hooks.redactor.Text(read.Detail)
			}
		}
	}
}
