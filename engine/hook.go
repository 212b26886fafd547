package engine

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/homelab-migrate/migrate/secret"
	"github.com/homelab-migrate/migrate/state"
)

// Hook receives every event. An error from a hook stops the run: the
// StateHook returns one when a checkpoint cannot be written, and going on
// without a record would break the promise that the state says where the
// run stopped.
type Hook interface {
	Handle(Event) error
}

// HookFunc adapts a function to Hook.
type HookFunc func(Event) error

// Handle calls f.
func (f HookFunc) Handle(e Event) error { return f(e) }

// StateHook checkpoints every record an event carries.
type StateHook struct {
	State state.Manager
}

// Handle writes e.Record before returning: durably (synced) for every
// outcome; for a step merely starting, written but synced with the next
// outcome, which keeps one sync per step off the critical path. A start
// lost to a power cut only makes resume apply the step again rather than
// observe it first, and providers' applies converge anyway.
func (h StateHook) Handle(e Event) error {
	if e.Record == nil {
		return nil
	}
	if e.Kind == StepStarted {
		return h.State.CheckpointUnsynced(e.Record)
	}
	return h.State.Checkpoint(e.Record)
}

// hooks fans an event out in order; the engine puts the StateHook first,
// so that no view shows a step as done before its completion is durable.
// Events arrive concurrently from parallel steps: every Hook must be safe
// for concurrent use (views take their own lock; the state group-commits).
// Before anything leaves the engine, every known secret is redacted from
// the event's text and from the record's last error, and terminal
// controls in them are made visible.
type hooks struct {
	list     []Hook
	redactor *secret.Scrubber
	log      *state.Log
}

func (h *hooks) emit(e Event) error {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Group = e.Addr.GroupPrefix()
	texts := []*string{&e.Message, &e.Error}
	if e.Record != nil {
		texts = append(texts, &e.Record.LastError)
	}
	// What a command or a guest printed reaches a terminal as text, never
	// as its escape sequences.
	for _, t := range texts {
		*t = secret.Visible(h.redactor.Text(*t))
	}
	// The log gets the whole event; the state and the views a bounded one.
	if h.log != nil {
		h.log.Write(logText(e))
	}
	for _, t := range texts {
		*t = state.CutError(*t, h.log.Path())
	}
	var first error
	for _, x := range h.list {
		if err := x.Handle(e); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// newRedactor knows the plain values of the runbook's sensitive variables
// from the start, and learns sensitive outputs as steps return them.
func newRedactor(secrets []string) *secret.Scrubber {
	s := &secret.Scrubber{}
	s.Add(secrets...)
	return s
}

// logText is e as a line of the event log, its error on the lines after.
func logText(e Event) []byte {
	var b strings.Builder
	b.WriteString(e.Time.UTC().Format(time.RFC3339Nano))
	b.WriteString(" " + string(e.Kind))
	if e.Phase != "" {
		b.WriteString(" phase=" + e.Phase)
	}
	if !e.Addr.IsZero() {
		b.WriteString(" " + e.Addr.String())
	}
	if e.Attempt > 0 {
		fmt.Fprintf(&b, " attempt=%d", e.Attempt)
	}
	if e.Duration > 0 {
		fmt.Fprintf(&b, " duration=%s", e.Duration.Round(time.Millisecond))
	}
	switch {
	case e.Kind == StepPlanned:
		// A diff: on lines of its own, like an error.
		if e.ReasonCode != "" {
			why, _ := json.Marshal(e.Why)
			b.WriteString(": planned again: " + string(e.ReasonCode) + " " + string(why))
		} else {
			b.WriteString(": planned now that its inputs are known")
		}
		if d := strings.TrimRight(e.Message, "\n"); d != "" {
			b.WriteString("\n  " + strings.ReplaceAll(d, "\n", "\n  "))
		}
	case e.ReasonCode != "":
		why, _ := json.Marshal(e.Why)
		b.WriteString(": " + string(e.ReasonCode) + " " + string(why))
	case e.Message != "":
		b.WriteString(": " + e.Message)
	}
	if e.Error != "" {
		b.WriteString("\n  error: " + strings.ReplaceAll(strings.TrimRight(e.Error, "\n"), "\n", "\n    "))
	}
	b.WriteByte('\n')
	return []byte(b.String())
}

// logValue writes v, as JSON, to the log: the plan a run or rollback
// carries out, as the view showed it (its diffs are redacted already).
func (h *hooks) logValue(what string, v any) {
	if h.log == nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(strconv.Quote(err.Error()))
	}
	fmt.Fprintf(h.log, "%s %s: %s\n", time.Now().UTC().Format(time.RFC3339Nano), what, b)
}
