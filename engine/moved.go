package engine

import (
	"fmt"
	"maps"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
)

// Move is a record carried to a step's new address by the runbook's moved
// blocks (a chain a -> b, b -> c is one move, a to c): plan shows it and
// decides the step from the record it carries; run and rollback apply it
// to the state, as one checkpoint each, before any step.
type Move struct {
	From phases.Address `json:"from"`
	To   phases.Address `json:"to"`
}

// moves follows the runbook's moved blocks, in order, over snap's records:
// what they carry where, and a copy of snap with the moves made. A block
// whose from has no record does nothing (the old name was never run
// here); one whose to has a record already is refused, with what to do,
// and moves nothing.
func (e *Engine) moves(snap *state.Snapshot) (*state.Snapshot, []Move, phases.Diagnostics) {
	if len(e.runbook.Moved) == 0 {
		return snap, nil, nil
	}
	moved := *snap
	moved.Steps = maps.Clone(snap.Steps)
	origin := map[phases.Address]phases.Address{} // where a moved record was at first
	var diags phases.Diagnostics
	for _, m := range e.runbook.Moved {
		rec := moved.Steps[m.From.String()]
		if rec == nil {
			continue
		}
		if other := moved.Steps[m.To.String()]; other != nil {
			diags = append(diags, withSubject(phases.Errorf("Cannot Move Onto a Record",
				"The moved block carries the record of %s to %s, but %s has a record of its own (%s): a step keeps one record, and a move does not merge two. "+
					"Remove the moved block: %s keeps its record, and the record of %s stays in the state, unused. "+
					"If what %s did must be undone, roll it back under its old name first (restore its block, `migrate rollback`), then rename it again.",
				m.From, m.To, m.To, other.Status, m.To, m.From, m.From), m.Range)...)
			continue
		}
		c := rec.Clone()
		c.Addr = m.To
		if s := e.steps[m.To]; s != nil {
			c.Phase = s.Phase
		}
		delete(moved.Steps, m.From.String())
		moved.Steps[m.To.String()] = c
		first, ok := origin[m.From]
		if !ok {
			first = m.From
		}
		delete(origin, m.From)
		origin[m.To] = first
	}
	var list []Move
	for _, m := range e.runbook.Moved {
		if first, ok := origin[m.To]; ok {
			list = append(list, Move{From: first, To: m.To})
			delete(origin, m.To)
		}
	}
	if len(list) == 0 {
		return snap, nil, diags
	}
	return &moved, list, diags
}

// movedSnapshot is snap with the runbook's moves made, as plan sees it.
func (e *Engine) movedSnapshot(snap *state.Snapshot) *state.Snapshot {
	moved, _, _ := e.moves(snap)
	return moved
}

// applyMoves makes the plan's moves in the state, one checkpoint each,
// before any step runs (under the lock: the first checkpoint takes it).
func (e *Engine) applyMoves(list []Move) error {
	for _, m := range list {
		phase := ""
		if s := e.steps[m.To]; s != nil {
			phase = s.Phase
		}
		if err := state.Move(e.state, m.From, m.To, phase); err != nil {
			return fmt.Errorf("%w: plan again", err)
		}
		e.hooks.logValue("moved", m)
	}
	return nil
}

// movedFrom is where the record a plan's step is decided from was.
func movedFrom(list []Move, a phases.Address) *phases.Address {
	for _, m := range list {
		if m.To == a {
			from := m.From
			return &from
		}
	}
	return nil
}

// movesText says what moves in a contract's refusal.
func movesText(list []Move) string {
	if len(list) == 0 {
		return "nothing"
	}
	var parts []string
	for _, m := range list {
		parts = append(parts, m.From.String()+" to "+m.To.String())
	}
	return strings.Join(parts, ", ")
}
