package views

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// PlanCounts summarises a plan's steps (checks are not counted).
type PlanCounts struct {
	Create, Update, Drift, NoOp int
	// Revert counts instances whose for_each key left the map, and the
	// steps of group call instances gone.
	Revert int
	// Checks that will run.
	Checks int
}

// Changes is the number of steps that would change something.
func (c PlanCounts) Changes() int { return c.Create + c.Update + c.Drift + c.Revert }

// CountPlan counts a plan's actions.
func CountPlan(p *engine.Plan) PlanCounts {
	var c PlanCounts
	for _, ph := range p.Phases {
		for _, s := range ph.Steps {
			if s.IsCheck() {
				if s.Action != providers.NoOp {
					c.Checks++
				}
				continue
			}
			switch s.Action {
			case providers.Create:
				c.Create++
			case providers.Update:
				c.Update++
			case providers.Drift:
				c.Drift++
			case providers.Revert:
				c.Revert++
			default:
				c.NoOp++
			}
		}
	}
	return c
}

// PlanJSON writes the plan as one indented JSON document, with the
// warnings every plan carries (an etcd backend in clear) under "warnings".
func PlanJSON(w io.Writer, p *engine.Plan, warnings ...string) error {
	var doc any = p
	if len(warnings) > 0 {
		doc = struct {
			*engine.Plan
			Warnings []string `json:"warnings"`
		}{p, warnings}
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Plan prints a plan for people, grouped by phase, like `terraform plan`.
func (v *View) Plan(p *engine.Plan) {
	w := bufio.NewWriter(v.out)
	defer w.Flush()
	renderPlan(w, v.st, p)
}

func renderPlan(w io.Writer, st styles, p *engine.Plan) {
	c := CountPlan(p)
	if c.Changes() > 0 {
		fmt.Fprintf(w, "Steps are marked with these symbols:\n  %s create  %s update  %s drifted  %s unchanged\n\n",
			st.green("+"), st.yellow("~"), st.magenta("!"), st.dim("="))
		if c.Revert > 0 {
			fmt.Fprintf(w, "  %s revert (a step the runbook no longer has: its block or group call deleted, or its for_each key removed)\n\n", st.red("-"))
		}
	}
	renderPrograms(w, st, p.Programs)
	renderLetGo(w, st, p.LetGo)
	for _, ph := range p.Phases {
		renderPhasePlan(w, st, ph)
	}
	renderServicePlans(w, st, p.Services)
	notes := "" // what the plan does besides steps
	if len(p.Moved) > 0 {
		where := "its step's new address"
		if len(p.Moved) > 1 {
			where = "their steps' new addresses"
		}
		notes = fmt.Sprintf(" %s moved to %s.", plural(len(p.Moved), "record", "records"), where)
	}
	reverts := ""
	if c.Revert > 0 {
		reverts = fmt.Sprintf(", %d to revert", c.Revert)
	}
	if len(p.LetGo) > 0 {
		notes += fmt.Sprintf(" %s let go (removed blocks): not undone.", plural(len(p.LetGo), "record", "records"))
	}
	fmt.Fprintf(w, "%s %d to create, %d to update, %d drifted%s, %d unchanged.%s\n",
		st.bold("Plan:"), c.Create, c.Update, c.Drift, reverts, c.NoOp, notes)
}

// renderLetGo says which records removed blocks let go, before the
// phases: no step runs for them, and nothing will undo them.
func renderLetGo(w io.Writer, st styles, list []engine.Forget) {
	for _, f := range list {
		fmt.Fprintf(w, "%s\n", st.dim(fmt.Sprintf("# %s let go (removed block at %s): what it did stays, and nothing will undo it", f.Addr, f.Block)))
	}
	if len(list) > 0 {
		fmt.Fprintln(w)
	}
}

// renderPrograms names the programs the run would give the runbook's
// secrets to, before the steps.
func renderPrograms(w io.Writer, st styles, progs []providers.Program) {
	if len(progs) == 0 {
		return
	}
	fmt.Fprintln(w, st.bold("Provider programs:"))
	for _, p := range progs {
		line := programLine(p)
		if !p.Verified {
			line = st.red(line)
		}
		fmt.Fprintf(w, "  %s: %s\n", p.Provider, line)
	}
	fmt.Fprintln(w)
}

func renderPhasePlan(w io.Writer, st styles, ph *engine.PhasePlan) {
	state := st.yellow("not complete")
	if ph.Complete {
		state = st.green("complete")
	}
	fmt.Fprintf(w, "%s %s (%s)\n", st.bold("Phase"), st.bold(ph.Name), state)
	if ph.Description != "" {
		fmt.Fprintf(w, "%s", indent(ph.Description, "  "+st.dim("# ")))
	}
	changes, checks := 0, 0
	for _, s := range ph.Steps {
		if s.IsCheck() {
			checks++
		} else if s.Action != providers.NoOp {
			changes++
		}
	}
	steps := len(ph.Steps) - checks
	for _, s := range ph.Steps {
		if s.MovedFrom != nil {
			fmt.Fprintf(w, "  %s\n", st.dim(fmt.Sprintf("# %s moved to %s", s.MovedFrom, s.Addr)))
		}
	}
	if changes == 0 {
		// Nothing changes: one line instead of a line per step.
		if steps > 0 {
			fmt.Fprintf(w, "  %s\n", st.dim(fmt.Sprintf("= %s unchanged", plural(steps, "step", "steps"))))
		} else {
			fmt.Fprintf(w, "  %s\n", st.dim("(no steps)"))
		}
	}
	for _, s := range ph.Steps {
		if s.IsCheck() {
			renderCheckPlan(w, st, s)
			continue
		}
		if changes == 0 {
			continue
		}
		renderStepPlan(w, st, s)
	}
	if len(ph.Irreversible()) > 0 {
		fmt.Fprintf(w, "  %s\n", st.bold(st.red("Rollback will NOT be able to undo:")))
		for _, x := range ph.Irreversible() {
			fmt.Fprintf(w, "    %s %s: %s\n", st.red("!"), x.Addr, firstLine(x.Reason))
		}
	}
	fmt.Fprintln(w)
}

func renderStepPlan(w io.Writer, st styles, s *engine.StepPlan) {
	addr := s.Addr.String()
	var line string
	switch s.Action {
	case providers.Create:
		line = st.green("+ "+addr) + " will run"
	case providers.Update:
		line = st.yellow("~ "+addr) + " will run again"
	case providers.Drift:
		line = st.magenta("! "+addr) + " has drifted and will run again"
	case providers.Revert:
		line = st.red("- "+addr) + " will be reverted"
	default:
		line := "= " + addr + " unchanged"
		if len(s.Recheck) > 0 {
			names := make([]string, len(s.Recheck))
			for i, a := range s.Recheck {
				names[i] = a.String()
			}
			line += " for now: read again once " + strings.Join(names, ", ") + " ran (what it acts on may change first)"
		}
		fmt.Fprintf(w, "  %s\n", st.dim(line))
		return
	}
	detail := Because(s.ReasonCode, s.Why)
	if detail != "" {
		line += ": " + firstLine(detail)
	}
	fmt.Fprintf(w, "  %s\n", line)
	if rest := restLines(detail); rest != "" {
		fmt.Fprint(w, indent(rest, "      "))
	}
	renderDiff(w, s)
}

// renderDiff prints a step's diff, and which steps it waits for when the
// diff does not say it.
func renderDiff(w io.Writer, s *engine.StepPlan) {
	if len(s.KnownAfter) > 0 && !strings.Contains(s.Diff, "(known after ") {
		names := make([]string, len(s.KnownAfter))
		for i, a := range s.KnownAfter {
			names[i] = a.String()
		}
		fmt.Fprintf(w, "      (known after %s)\n", strings.Join(names, ", "))
	}
	if s.Diff != "" {
		fmt.Fprint(w, indent(cutLines(s.Diff), "      "))
	}
}

func renderCheckPlan(w io.Writer, st styles, s *engine.StepPlan) {
	when := string(s.When)
	if s.Action == providers.NoOp {
		fmt.Fprintf(w, "  %s\n", st.dim(fmt.Sprintf("= check %s (%s): passed, not run again", s.Addr, when)))
		return
	}
	runs := when + " the phase's steps"
	switch len(s.WaitsFor) {
	case 0:
	case 1:
		runs = "once " + addrs(s.WaitsFor) + " is done"
	default:
		runs = "once " + addrs(s.WaitsFor) + " are done"
	}
	fmt.Fprintf(w, "  %s will run %s\n", st.cyan("? check "+s.Addr.String()), runs)
	renderDiff(w, s)
}

// cutLines cuts every line of a diff longer than state.MaxErrorBytes: a
// diff may be long, but a line of megabytes (a huge argument) is no use
// on a terminal. A plan saved with --out keeps it whole.
func cutLines(s string) string {
	if len(s) <= state.MaxErrorBytes {
		return s
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = state.CutError(l, "")
	}
	return strings.Join(lines, "\n")
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

func restLines(s string) string {
	_, r, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return r
}
