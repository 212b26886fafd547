package views

import (
	"bufio"
	"fmt"

	"github.com/homelab-migrate/migrate/engine"
)

// RollbackPlan prints what a rollback will undo, phase by phase from the
// last, and first of all what it cannot undo.
func (v *View) RollbackPlan(p *engine.RollbackPlan) {
	w := bufio.NewWriter(v.out)
	defer w.Flush()
	st := v.st
	renderPrograms(w, st, p.Programs)
	for _, m := range p.Moved {
		fmt.Fprintf(w, "%s\n", st.dim(fmt.Sprintf("# %s moved to %s", m.From, m.To)))
	}
	if len(p.Moved) > 0 {
		fmt.Fprintln(w)
	}
	renderLetGo(w, st, p.LetGo)
	irr := 0
	for _, ph := range p.Phases {
		irr += len(ph.Irreversible)
	}
	if irr > 0 {
		fmt.Fprintf(w, "%s\n", st.bold(st.red("These steps CANNOT be undone and will stay as they are:")))
		for _, ph := range p.Phases {
			for _, a := range ph.Irreversible {
				fmt.Fprintf(w, "  %s %s %s\n", st.red("!"), a, st.dim("(phase "+ph.Name+")"))
			}
		}
		fmt.Fprintln(w)
	}
	revert, gone := 0, 0
	for _, ph := range p.Phases {
		for _, r := range ph.Revert {
			if r.GoneWith != nil {
				gone++
			} else {
				revert++
			}
		}
		if len(ph.Revert) == 0 {
			fmt.Fprintf(w, "%s %s: %s\n\n", st.bold("Phase"), st.bold(ph.Name), st.dim("nothing to undo"))
			continue
		}
		fmt.Fprintf(w, "%s %s\n", st.bold("Phase"), st.bold(ph.Name))
		for _, r := range ph.Revert {
			if r.GoneWith != nil {
				fmt.Fprintf(w, "  %s\n", st.dim("· "+r.Addr.String()+": nothing to undo, it went with "+r.GoneWith.String()))
				continue
			}
			fmt.Fprintf(w, "  %s will be undone: %s\n", st.yellow("- "+r.Addr.String()), firstLine(r.Description))
			if rest := restLines(r.Description); rest != "" {
				fmt.Fprint(w, indent(rest, "      "))
			}
			if r.Changed != "" {
				fmt.Fprintf(w, "      %s\n", st.red("! changed outside migrate since it ran: "+r.Changed))
				fmt.Fprintf(w, "      %s\n", st.red("  undoing it discards that change too"))
			}
		}
		fmt.Fprintln(w)
	}
	if gone > 0 {
		fmt.Fprintf(w, "%s %d to undo, %d gone with what removed them, %d cannot be undone.\n", st.bold("Rollback:"), revert, gone, irr)
		return
	}
	fmt.Fprintf(w, "%s %d to undo, %d cannot be undone.\n", st.bold("Rollback:"), revert, irr)
}

// RollbackCounts returns how many steps a rollback would undo and how many
// it cannot.
func RollbackCounts(p *engine.RollbackPlan) (revert, irreversible int) {
	for _, ph := range p.Phases {
		revert += len(ph.Revert)
		irreversible += len(ph.Irreversible)
	}
	return revert, irreversible
}
