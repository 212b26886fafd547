package engine

import (
	"fmt"
	"slices"
	"sort"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
)

// Forget is a record a removed block with revert = false lets go: its
// step is no longer in the runbook, what it did stays as it is, and no
// run or rollback undoes it. Run and rollback write it into the state
// first, as they make the moves (applyForgets).
type Forget struct {
	Addr phases.Address `json:"address"`
	// Block is where the removed block is, as file:line.
	Block string `json:"block"`
}

// forgets lists the records still to undo that a removed block with
// revert = false lets go, by address: records of steps the runbook has
// in no form (a step it still runs is never let go).
func (e *Engine) forgets(snap *state.Snapshot) []Forget {
	var out []Forget
	for _, rec := range snap.Steps {
		a := rec.Addr
		if r := e.letGo(a); r != nil && needsRevert(rec) {
			out = append(out, Forget{Addr: a, Block: fmt.Sprintf("%s:%d", r.Range.Filename, r.Range.StartLine)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr.String() < out[j].Addr.String() })
	return out
}

// letGo is the removed block with revert = false that is about a, a step
// the runbook does not have; nil if none.
func (e *Engine) letGo(a phases.Address) *phases.Removed {
	if e.steps[a] != nil {
		return nil
	}
	i := slices.IndexFunc(e.runbook.Removed, func(r *phases.Removed) bool { return !r.Revert && r.Matches(a) })
	if i < 0 {
		return nil
	}
	return e.runbook.Removed[i]
}

// applyForgets writes the plan's forgets into the state, one checkpoint
// each: the record keeps its history and says who let it go, without the
// revert data that would have undone it (a revert a rollback left half
// done stays half done: the block says so).
func (e *Engine) applyForgets(list []Forget) error {
	for _, f := range list {
		rec, ok := e.state.Step(f.Addr)
		if !ok || !needsRevert(rec) {
			continue // let go already, by an earlier run stopped after it
		}
		rec.Revert = nil
		if rec.Facts == nil {
			rec.Facts = map[string]string{}
		}
		rec.Facts["let_go_by"] = "removed block at " + f.Block
		if err := e.state.Checkpoint(rec); err != nil {
			return fmt.Errorf("letting %s go: %w", f.Addr, err)
		}
		e.hooks.logValue("let_go", f)
	}
	return nil
}

// forgetsText says what is let go in a contract's refusal.
func forgetsText(list []Forget) string {
	if len(list) == 0 {
		return "nothing"
	}
	addrs := make([]phases.Address, len(list))
	for i, f := range list {
		addrs[i] = f.Addr
	}
	return joinAddrs(addrs)
}
