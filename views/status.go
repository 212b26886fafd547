package views

import (
	"bufio"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
)

// Phase statuses shown by `migrate status`.
const (
	PhaseComplete   = "complete"
	PhaseInProgress = "in progress"
	PhaseFailed     = "failed"
	PhaseNotStarted = "not started"
	PhaseRolledBack = "rolled back"
	// PhasePartlyRolledBack: a rollback undid some of the phase's steps
	// and stopped (interrupted, or a step could not be undone) before the
	// others.
	PhasePartlyRolledBack = "partly rolled back"
	PhaseRollbackFailed   = "rollback failed"
)

// Status is where a migration stands: every phase in run order, every step
// with its record. It is also the JSON form of `migrate status --json`.
type Status struct {
	Lineage string        `json:"lineage"`
	Serial  uint64        `json:"serial"`
	Phases  []PhaseStatus `json:"phases"`
	// Orphans are records of steps the runbook no longer has.
	Orphans []StepStatus `json:"orphans,omitempty"`
	// Services are the runbook's services with their windows of
	// downtime (ServiceWindows).
	Services []ServiceStatus `json:"services,omitempty"`
}

// PhaseStatus is one phase.
type PhaseStatus struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	// Detail explains a partial rollback: what is undone, what is left.
	Detail string       `json:"detail,omitempty"`
	Steps  []StepStatus `json:"steps"`
}

// StepStatus is one step or check; a step that never ran is "pending".
type StepStatus struct {
	Addr       phases.Address    `json:"address"`
	Group      string            `json:"group,omitempty"` // Addr.GroupPrefix()
	Phase      string            `json:"phase,omitempty"`
	When       phases.CheckWhen  `json:"when,omitempty"`
	Status     state.Status      `json:"status"`
	Attempts   int               `json:"attempts"`
	StartedAt  *time.Time        `json:"started_at,omitempty"`
	FinishedAt *time.Time        `json:"finished_at,omitempty"`
	LastError  string            `json:"last_error,omitempty"`
	Facts      map[string]string `json:"facts,omitempty"`
	// undoable: the record holds revert data, so a rollback undoes it;
	// a done step without one stays done after a rollback.
	undoable bool
}

// BuildStatus joins the runbook's phases (in run order) with the state.
func BuildStatus(order []*phases.Phase, snap *state.Snapshot) *Status {
	st := &Status{Lineage: snap.Lineage, Serial: snap.Serial}
	known := map[string]bool{}
	for _, ph := range order {
		ps := PhaseStatus{Name: ph.Name}
		var list []*phases.Step
		for _, c := range ph.Checks {
			if c.When == phases.CheckBefore {
				list = append(list, c)
			}
		}
		list = append(list, ph.Steps...)
		for _, c := range ph.Checks {
			if c.When != phases.CheckBefore {
				list = append(list, c)
			}
		}
		for _, s := range list {
			known[s.Addr.String()] = true
			ps.Steps = append(ps.Steps, stepStatus(s.Addr, s.When, snap.Steps[s.Addr.String()]))
		}
		ps.Status, ps.Detail = phaseStatus(ps.Steps)
		st.Phases = append(st.Phases, ps)
	}
	var orphans []string
	for k := range snap.Steps {
		if !known[k] {
			orphans = append(orphans, k)
		}
	}
	sort.Strings(orphans)
	for _, k := range orphans {
		rec := snap.Steps[k]
		s := stepStatus(rec.Addr, "", rec)
		s.Phase = rec.Phase
		st.Orphans = append(st.Orphans, s)
	}
	return st
}

func stepStatus(a phases.Address, when phases.CheckWhen, rec *state.StepRecord) StepStatus {
	s := StepStatus{Addr: a, Group: a.GroupPrefix(), When: when, Status: state.Pending}
	if rec == nil {
		return s
	}
	s.Status = rec.Status
	s.Attempts = rec.Attempts
	s.StartedAt, s.FinishedAt = rec.StartedAt, rec.FinishedAt
	s.LastError = rec.LastError
	s.Facts = rec.Facts
	s.undoable = rec.Revert != nil
	return s
}

// phaseStatus says where a phase stands. It is complete, as the engine
// counts it, when every step and after-check is done; before-checks only
// gate its start. After a rollback the steps it could not undo stay done,
// so "rolled back" is decided by what the rollback left: nothing that it
// can undo is done since the last step it undid (else a rollback stopped
// half-way, or a new run started).
func phaseStatus(steps []StepStatus) (status, detail string) {
	complete, touched := true, false
	var lastRevert time.Time
	reverted, undoable := 0, 0
	for _, s := range steps {
		switch s.Status {
		case state.Failed:
			return PhaseFailed, ""
		case state.RevertFailed:
			return PhaseRollbackFailed, ""
		case state.Reverting:
			return PhasePartlyRolledBack, fmt.Sprintf("a rollback stopped while undoing %s: run migrate rollback again", s.Addr)
		case state.Running:
			touched = true
		case state.Pending:
			// Started, then stopped while it waited (its last error says
			// what was not waited for): not done, but touched.
			touched = touched || s.StartedAt != nil
		case state.Reverted:
			if s.When == "" {
				reverted++
			}
			if s.FinishedAt != nil && s.FinishedAt.After(lastRevert) {
				lastRevert = *s.FinishedAt
			}
		}
		if s.When != phases.CheckBefore && s.Status != state.Done {
			complete = false
		}
	}
	rolledBack := !lastRevert.IsZero()
	for _, s := range steps {
		if s.Status != state.Done || s.When != "" {
			continue
		}
		switch {
		case s.FinishedAt != nil && s.FinishedAt.After(lastRevert):
			rolledBack = false // run again since
		case s.undoable:
			undoable++ // the rollback has still to undo it
		}
	}
	switch {
	case complete:
		return PhaseComplete, ""
	case touched:
		return PhaseInProgress, ""
	case rolledBack && undoable > 0:
		return PhasePartlyRolledBack, fmt.Sprintf("%d undone, %d still to undo: run migrate rollback again", reverted, undoable)
	case rolledBack:
		return PhaseRolledBack, ""
	}
	for _, s := range steps {
		if s.Status == state.Done {
			return PhaseInProgress, ""
		}
	}
	return PhaseNotStarted, ""
}

// StatusJSON writes the status as one indented JSON document.
func (v *View) StatusJSON(s *Status) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	_, err = v.out.Write(append(b, '\n'))
	return err
}

// Status prints where a migration stands, for people.
func (v *View) Status(s *Status) {
	bw := bufio.NewWriter(v.out)
	defer bw.Flush()
	st := v.st
	if s.Lineage == "" {
		fmt.Fprintln(bw, st.dim("No state yet: nothing has run."))
	}
	for _, ph := range s.Phases {
		status := ph.Status
		if ph.Detail != "" {
			status += " (" + ph.Detail + ")"
		}
		fmt.Fprintf(bw, "%s %s: %s\n", st.bold("Phase"), st.bold(ph.Name), paintPhase(st, ph.Status, status))
		renderSteps(bw, st, ph.Steps)
		fmt.Fprintln(bw)
	}
	if len(s.Orphans) > 0 {
		fmt.Fprintln(bw, st.bold("Recorded steps the runbook no longer has:"))
		renderSteps(bw, st, s.Orphans)
	}
	renderServices(bw, st, s.Services, time.Now())
}

func paintPhase(st styles, status, text string) string {
	switch status {
	case PhaseComplete:
		return st.green(text)
	case PhaseFailed, PhaseRollbackFailed:
		return st.red(text)
	case PhaseInProgress, PhasePartlyRolledBack:
		return st.yellow(text)
	}
	return st.dim(text)
}

func renderSteps(bw *bufio.Writer, st styles, steps []StepStatus) {
	if len(steps) == 0 {
		fmt.Fprintf(bw, "  %s\n", st.dim("(no steps)"))
		return
	}
	// Styles go around whole cells only after tabwriter has aligned them,
	// so that escape codes do not skew the columns.
	var buf strings.Builder
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	for _, s := range steps {
		name := s.Addr.String()
		if s.When != "" {
			name = "check " + name + " (" + string(s.When) + ")"
		}
		times := ""
		if s.StartedAt != nil {
			times = s.StartedAt.Local().Format("2006-01-02 15:04:05")
			if s.FinishedAt != nil && !s.FinishedAt.Before(*s.StartedAt) {
				times += " (" + fmtDuration(s.FinishedAt.Sub(*s.StartedAt)) + ")"
			}
		}
		attempts := ""
		if s.Attempts > 0 {
			attempts = plural(s.Attempts, "attempt", "attempts")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, s.Status, attempts, times, recordText(s.Facts))
	}
	tw.Flush()
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	for i, s := range steps {
		sym, paint := statusMark(st, s.Status)
		fmt.Fprintf(bw, "  %s %s\n", paint(sym), paintLine(paint, s.Status, strings.TrimRight(lines[i], " ")))
		if s.LastError != "" {
			bar := st.red("| ")
			if s.Status == state.Pending {
				bar = st.yellow("| ") // stopped while it waited: no failure
			}
			fmt.Fprint(bw, indent(s.LastError, "      "+bar))
		}
	}
}

func paintLine(paint func(string) string, s state.Status, line string) string {
	if s == state.Done || s == state.Pending {
		return line
	}
	return paint(line)
}

func statusMark(st styles, s state.Status) (string, func(string) string) {
	switch s {
	case state.Done:
		return "✓", st.green
	case state.Failed, state.RevertFailed:
		return "✗", st.red
	case state.Running, state.Reverting:
		return "…", st.yellow
	case state.Reverted:
		return "↺", st.dim
	}
	return "·", st.dim
}

func recordText(r map[string]string) string {
	if len(r) == 0 {
		return ""
	}
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + r[k]
	}
	return strings.Join(parts, " ")
}
