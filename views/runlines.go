package views

import (
	"fmt"
	"strings"

	"github.com/homelab-migrate/migrate/engine"
)

// How each kind of event of a run or rollback reads, for people: the
// plain and live modes of the run view (run.go) write these lines.

func stepName(e engine.Event) string {
	if e.Check {
		return "check " + e.Addr.String()
	}
	return e.Addr.String()
}

// eventLines renders one event as the lines a person reads, with marks
// when live. Started events render nothing in live mode: the live area
// shows them.
func (b *runBase) eventLines(st styles, e engine.Event, live bool) string {
	r := lineRenderer{st: st, live: live, name: stepName(e)}
	switch e.Kind {
	case engine.PhaseStarted:
		return r.phaseStarted(e, "started")
	case engine.PhaseRollbackStarted:
		return r.phaseStarted(e, "rolling back")
	case engine.PhaseUpToDate:
		return r.phaseUpToDate(e)
	case engine.PhaseCompleted:
		return r.phaseEnded(e, b.phases[e.Phase], "complete", st.green)
	case engine.PhaseRolledBack:
		return r.phaseEnded(e, b.phases[e.Phase], "rolled back", st.green)
	case engine.PhaseFailed:
		return r.phaseEnded(e, b.phases[e.Phase], "failed", st.red)
	case engine.Interrupted:
		return r.phaseEnded(e, b.phases[e.Phase], "interrupted", st.yellow)
	case engine.StepStarted:
		return r.stepStarted(e)
	case engine.StepReverting:
		return r.stepReverting(e)
	case engine.StepPlanned:
		return r.stepPlanned(e)
	case engine.StepOutput:
		return r.stepOutput(e)
	case engine.StepRetrying:
		return r.stepRetrying(e, b.withoutShownOutput(e))
	case engine.StepDone:
		return r.stepDone(e)
	case engine.StepAdopted:
		return r.mark(st.green("✓")) + r.name + ": done before the last run stopped; recorded without running it again\n"
	case engine.StepFailed:
		return r.stepFailed("failed", b.withoutShownOutput(e))
	case engine.StepRevertFailed:
		return r.stepFailed("could not be undone", b.withoutShownOutput(e))
	case engine.StepStopped:
		// Not a failure: what it waited for was not waited for.
		msg := b.withoutShownOutput(e)
		return r.mark(st.yellow("■")) + st.yellow(fmt.Sprintf("%s: %s", r.name, e.Message)) + "\n" + indent(msg, "    ")
	case engine.StepSkipped:
		return r.stepSkipped(e)
	case engine.StepReverted:
		return r.stepReverted(e)
	}
	return ""
}

// lineRenderer writes the lines of one event (eventLines).
type lineRenderer struct {
	st   styles
	live bool
	name string // the event's step, as stepName says it
}

// mark is sym and a space when live, nothing otherwise.
func (r lineRenderer) mark(sym string) string {
	if r.live {
		return sym + " "
	}
	return ""
}

func (r lineRenderer) phaseStarted(e engine.Event, verb string) string {
	if r.live {
		return r.st.bold("Phase "+e.Phase) + " " + verb + "\n"
	}
	return fmt.Sprintf("Phase %s: %s\n", e.Phase, verb)
}

func (r lineRenderer) phaseUpToDate(e engine.Event) string {
	line := fmt.Sprintf("Phase %s: already complete, nothing to do.", e.Phase)
	if r.live {
		return r.st.dim(line) + "\n\n"
	}
	return line + "\n"
}

// phaseEnded is the line closing a phase: how it ended (word), what its
// steps did (t, nil when none was counted) and how long it took.
func (r lineRenderer) phaseEnded(e engine.Event, t *tally, word string, paint func(string) string) string {
	if t == nil {
		t = &tally{}
	}
	dur := ""
	if e.Duration > 0 {
		dur = " in " + fmtDuration(e.Duration)
	}
	line := fmt.Sprintf("Phase %s %s: %s%s.", e.Phase, word, t, dur)
	if r.live {
		return paint(line) + "\n\n"
	}
	return line + "\n"
}

func (r lineRenderer) stepStarted(e engine.Event) string {
	switch {
	case r.live:
		return ""
	case e.Attempt > 1:
		return fmt.Sprintf("%s: started (attempt %d)\n", r.name, e.Attempt)
	}
	return r.name + ": started\n"
}

func (r lineRenderer) stepReverting(e engine.Event) string {
	switch {
	case r.live:
		return ""
	case e.Message != "":
		return fmt.Sprintf("%s: reverting: %s\n", r.name, firstLine(e.Message))
	}
	return r.name + ": reverting\n"
}

// stepPlanned shows the diff of a step whose plan waited for earlier
// steps: what it will do, now that its inputs are known.
func (r lineRenderer) stepPlanned(e engine.Event) string {
	head := r.name + ": planned now that its inputs are known"
	if why := eventBecause(e); why != "" {
		head = r.name + ": planned again: " + why
	}
	if strings.TrimSpace(e.Message) == "" {
		return r.mark(r.st.cyan("≡")) + head + " (no diff)\n"
	}
	return r.mark(r.st.cyan("≡")) + head + ":\n" + indent(cutLines(e.Message), "    ")
}

func (r lineRenderer) stepOutput(e engine.Event) string {
	if r.live {
		return r.st.dim(r.name+" | ") + r.st.dim(e.Message) + "\n"
	}
	return r.name + " | " + e.Message + "\n"
}

// stepRetrying: msg is the error, less the output shown above it.
func (r lineRenderer) stepRetrying(e engine.Event, msg string) string {
	line := fmt.Sprintf("%s: attempt %d failed, %s: %s", r.name, e.Attempt, e.Message, firstLine(msg))
	return r.mark(r.st.yellow("↻")) + r.st.yellow(line) + "\n" + indent(restLines(msg), "    ")
}

func (r lineRenderer) stepDone(e engine.Event) string {
	if r.live {
		return fmt.Sprintf("%s %s %s\n", r.st.green("✓"), r.name, r.st.dim("("+fmtDuration(e.Duration)+")"))
	}
	return fmt.Sprintf("%s: done (%s)\n", r.name, fmtDuration(e.Duration))
}

// stepFailed says what failed (a step, or undoing it) and why: msg is the
// error, less the output shown above it.
func (r lineRenderer) stepFailed(what, msg string) string {
	return r.mark(r.st.red("✗")) + r.st.red(fmt.Sprintf("%s: %s: %s", r.name, what, firstLine(msg))) + "\n" + indent(restLines(msg), "    ")
}

func (r lineRenderer) stepSkipped(e engine.Event) string {
	msg := e.Message
	if msg == "" {
		msg = "a step it depends on failed"
	}
	return r.mark(r.st.dim("-")) + r.st.dim(fmt.Sprintf("%s: skipped: %s", r.name, msg)) + "\n"
}

// stepReverted says why nothing was undone (it went with the VM), else
// how long undoing took.
func (r lineRenderer) stepReverted(e engine.Event) string {
	note := ""
	switch {
	case eventBecause(e) != "":
		note = " (" + eventBecause(e) + ")"
	case e.Duration > 0:
		note = " (" + fmtDuration(e.Duration) + ")"
	}
	if r.live {
		return fmt.Sprintf("%s %s reverted%s\n", r.st.green("↺"), r.name, r.st.dim(note))
	}
	return fmt.Sprintf("%s: reverted%s\n", r.name, note)
}
