package engine

import (
	"context"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// NoteChanges asks the provider of every done step the rollback plan undoes
// what is there now (Read) and notes, in the entry, a change made outside
// migrate since the step ran: undoing the step discards that change too (a
// release upgraded by hand is uninstalled with it), and the person asked to
// confirm must know it first. A step that cannot be read gets no note.
func (e *Engine) NoteChanges(ctx context.Context, rp *RollbackPlan) {
	snap := e.state.Snapshot()
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
