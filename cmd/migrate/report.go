package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/views"
)

func (a *app) reportCommand() *cobra.Command {
	vf := varFlags{optional: true}
	var format, output string
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Draw the runs and rollbacks as a timeline: every step's attempts, kills, resumes, each service's downtime",
		Long: `Draw what the event logs of the state directory (logs/, the 20 newest
runs and rollbacks) tell as a timeline: each phase a lane, each attempt of
a step a bar coloured by how it ended, each run and rollback marked where
it started, a run killed (its log has no end) marked where its log ends
and the next one marked resumed (one still at work, holding the state's
lock, is drawn running), and each service's window of downtime
(from the state) shaded with its downtime and max_downtime. The svg format
is one picture; html is a page with the picture and tables of the services
and sessions. Neither needs anything else to be read: no script, font or
file is fetched.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) (err error) {
			if format != views.ReportSVG && format != views.ReportHTML {
				return fmt.Errorf("--format %q: use %s or %s", format, views.ReportSVG, views.ReportHTML)
			}
			rb, st, b, order, err := a.readState(vf)
			if err != nil {
				return err
			}
			defer a.closeState(st, &err)
			dir := filepath.Join(b.Dir, state.LogsDir)
			sessions, err := a.readLogs(dir)
			if err != nil {
				return err
			}
			if len(sessions) == 0 {
				return fmt.Errorf("nothing has run yet: %s has no event log (run and rollback write one)", dir)
			}
			// The newest log without its end is a command still at work
			// while someone holds the lock; killed otherwise.
			running := false
			if last := sessions[len(sessions)-1]; last.Killed {
				holder, err := b.ReadLock(context.Background())
				running = err == nil && holder != nil
			}
			title := "migrate report: " + filepath.Base(rb.Dir)
			tl := timeline(title, order, sessions, running, views.ServiceWindows(rb.Services, st.Snapshot()))
			if output == "" {
				return a.view().Report(tl, format)
			}
			var buf bytes.Buffer
			if err := views.New(views.Options{Stdout: &buf, Stderr: io.Discard}).Report(tl, format); err != nil {
				return err
			}
			if err := writeFileShared(output, buf.Bytes()); err != nil {
				return err
			}
			a.view().Note("Wrote %s: %d sessions, %d step attempts.", output, len(tl.Sessions), len(tl.Bars))
			return nil
		},
	}
	vf.add(cmd)
	cmd.Flags().StringVar(&format, "format", views.ReportSVG, "output `FORMAT`: svg or html")
	cmd.Flags().StringVar(&output, "output", "", "write to `FILE` (mode 0644, replaced whole) instead of stdout")
	return cmd
}

// readLogs reads every event log in dir, oldest first (their names sort
// by time); a log without any event (a command killed as it began) is
// skipped with a warning. No directory: no log.
func (a *app) readLogs(dir string) ([]engine.LogSession, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var out []engine.LogSession
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("event log: %w", err)
		}
		ls, err := engine.ReadLog(name, f)
		f.Close()
		if err != nil {
			a.view().Warn("%v: left out", err)
			continue
		}
		out = append(out, ls)
	}
	return out, nil
}

// timeline is what the report draws: the phases in run order as lanes,
// the logs' sessions, their attempts as bars (checks known from the
// runbook), the services' windows. running says the last session, which
// has no end line, is still at work rather than killed.
func timeline(title string, order []*phases.Phase, sessions []engine.LogSession, running bool, services []views.ServiceStatus) *views.Timeline {
	tl := &views.Timeline{Title: title, Services: services}
	checks := map[phases.Address]bool{}
	for _, ph := range order {
		tl.Phases = append(tl.Phases, ph.Name)
		for _, c := range ph.Checks {
			checks[c.Addr] = true
		}
	}
	for i, s := range sessions {
		live := running && i == len(sessions)-1
		tl.Sessions = append(tl.Sessions, views.TimelineSession{Command: s.Command, Start: s.Start, End: s.End, Ended: s.Ended, Killed: s.Killed && !live, Running: live})
		for _, at := range s.Attempts {
			// A step skipped, or marked reverted with nothing to undo,
			// took no time and did nothing: no bar.
			if !at.Started && (at.Outcome == engine.StepSkipped || at.Outcome == engine.StepReverted) {
				continue
			}
			tl.Bars = append(tl.Bars, views.TimelineBar{
				Phase: at.Phase, Address: at.Addr.String(), Check: checks[at.Addr], Revert: at.Revert, Attempt: at.Attempt,
				Start: at.Start, End: at.End, Outcome: outcome(at, live),
			})
		}
	}
	return tl
}

// outcome is how the report names the end of an attempt (of a session
// still at work when live).
func outcome(at engine.LogAttempt, live bool) views.Outcome {
	switch at.Outcome {
	case engine.StepDone:
		return views.OutcomeDone
	case engine.StepAdopted:
		return views.OutcomeAdopted
	case engine.StepFailed:
		return views.OutcomeFailed
	case engine.StepRetrying:
		return views.OutcomeRetried
	case engine.StepStopped:
		return views.OutcomeStopped
	case engine.StepSkipped:
		return views.OutcomeSkipped
	case engine.StepReverted:
		return views.OutcomeReverted
	case engine.StepRevertFailed:
		return views.OutcomeRevertFailed
	}
	switch {
	case at.Killed && live:
		return views.OutcomeRunning
	case at.Killed:
		return views.OutcomeKilled
	}
	return views.OutcomeUnknown
}

// writeFileShared replaces path with data, mode 0644 (a report is for
// sharing; the logs it is drawn from hold no secret in clear): through a
// temporary file in the same directory, synced, then renamed over it, so
// that it is never seen half written.
func writeFileShared(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	_, err = tmp.Write(data)
	err = errors.Join(err, tmp.Chmod(0o644), tmp.Sync(), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
