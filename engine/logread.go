package engine

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/homelab-migrate/migrate/phases"
)

// LogSession is one writing command (run, rollback) as its event log
// (logText's lines, then the command's end line) tells it, for the
// report: when it ran, how it ended, and every attempt of a step.
type LogSession struct {
	// Command is run or rollback, from the log's name.
	Command string
	// Start and End are the earliest and latest times of the log's lines
	// (its first and last, as the log is written in order).
	Start, End time.Time
	// Ended is the text of the end line ("ok", "exit code 1", an error's
	// first line); empty when the log has none.
	Ended string
	// Killed says the log has no end line: the process was killed
	// (SIGKILL leaves none; what it wrote in its last 200 ms may be
	// missing too), or it is still running.
	Killed   bool
	Attempts []LogAttempt
}

// LogAttempt is one attempt of a step, or one revert of it: from its
// start event to the event that ended it.
type LogAttempt struct {
	Phase string
	Addr  phases.Address
	// Attempt is the try's number (a step with retry); 0 for a revert.
	Attempt int
	Revert  bool
	// Started says the log has the attempt's start; false: only its end
	// (a step adopted from a killed run, one refused before it ran), and
	// Start is End.
	Started    bool
	Start, End time.Time
	// Outcome is the event that ended the attempt: StepDone, StepAdopted,
	// StepFailed, StepRetrying (failed, tried again), StepStopped,
	// StepSkipped, StepReverted, StepRevertFailed; empty when none did.
	Outcome EventKind
	// Killed says the log ended without one (the process was killed): End
	// is the log's last time.
	Killed bool
}

// maxLogLine is the most of a line ReadLog looks at: the time, the kind,
// the phase and the address come first; the rest of a longer line (a
// plan as JSON, a huge message) is skipped unread.
const maxLogLine = 64 << 10

// maxEndText bounds the end line's text ReadLog keeps.
const maxEndText = 1 << 10

// ReadLog reads one event log: name is its file name (logs/<UTC
// time>-<command>.log), which gives the command. A line it cannot read is
// skipped, as are the indented lines that continue an event (its error,
// a diff); it fails only when no line has a time. Every line with a time
// counts for the session's start and end, the session's own (TIME alive,
// written while nothing else is, TIME end: TEXT) too: a killed command's
// End is when it last wrote, within a couple of seconds of its death.
func ReadLog(name string, r io.Reader) (LogSession, error) {
	ls := LogSession{Command: logCommand(name), Killed: true}
	open := map[string]int{} // address -> index in ls.Attempts of its open attempt
	br := bufio.NewReaderSize(r, maxLogLine)
	seen := false
	for {
		line, err := readLogLine(br)
		if len(line) > 0 && line[0] != ' ' && line[0] != '\t' {
			if l, ok := parseLogLine(line); ok {
				if !seen || l.time.Before(ls.Start) {
					ls.Start = l.time
				}
				if !seen || l.time.After(ls.End) {
					ls.End = l.time
				}
				seen = true
				ls.add(open, l)
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return ls, fmt.Errorf("event log %s: %w", name, err)
			}
			break
		}
	}
	if !seen {
		return ls, fmt.Errorf("event log %s: no event in it", name)
	}
	// An attempt the log does not end ends with it: cut off by the kill.
	for _, i := range open {
		ls.Attempts[i].End, ls.Attempts[i].Killed = ls.End, ls.Killed
	}
	for i := range ls.Attempts {
		if a := &ls.Attempts[i]; a.End.Before(a.Start) {
			a.End = a.Start
		}
	}
	return ls, nil
}

// add applies one line to the session.
func (ls *LogSession) add(open map[string]int, l logLine) {
	switch l.kind {
	case "end":
		ls.Ended, ls.Killed = l.text, false
		return
	case StepStarted, StepReverting:
		key := l.addr.String()
		if i, ok := open[key]; ok {
			// A start while one is open: the log lost the end.
			ls.Attempts[i].End = l.time
		}
		open[key] = len(ls.Attempts)
		ls.Attempts = append(ls.Attempts, LogAttempt{
			Phase: l.phase, Addr: l.addr, Attempt: l.attempt, Revert: l.kind == StepReverting,
			Started: true, Start: l.time,
		})
		return
	case StepDone, StepAdopted, StepFailed, StepRetrying, StepStopped, StepSkipped, StepReverted, StepRevertFailed:
	default:
		return
	}
	key := l.addr.String()
	i, ok := open[key]
	if !ok {
		ls.Attempts = append(ls.Attempts, LogAttempt{
			Phase: l.phase, Addr: l.addr, Attempt: l.attempt,
			Revert: l.kind == StepReverted || l.kind == StepRevertFailed,
			Start:  l.time,
		})
		i = len(ls.Attempts) - 1
	}
	delete(open, key)
	a := &ls.Attempts[i]
	a.End, a.Outcome = l.time, l.kind
	if a.Phase == "" {
		a.Phase = l.phase
	}
}

// logCommand is the command of a log named <UTC time>-<command>.log.
func logCommand(name string) string {
	base := strings.TrimSuffix(filepath.Base(name), ".log")
	_, cmd, ok := strings.Cut(base, "-")
	if !ok {
		return ""
	}
	return cmd
}

// readLogLine returns the next line without its newline, at most
// maxLogLine bytes of it; the rest of a longer line is read and dropped.
func readLogLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		head := append([]byte(nil), line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = br.ReadSlice('\n')
		}
		return head, err
	}
	return trimEOL(line), err
}

func trimEOL(b []byte) []byte {
	return bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
}

// logLine is what ReadLog takes from a line.
type logLine struct {
	time    time.Time
	kind    EventKind
	phase   string
	addr    phases.Address
	attempt int
	text    string // the end line's
}

// parseLogLine reads TIME KIND [phase=P] [ADDRESS] [attempt=N]
// [duration=D][: MESSAGE] (logText), or TIME end: TEXT, or TIME WHAT:
// JSON (logValue); false for anything else.
func parseLogLine(b []byte) (logLine, bool) {
	s := string(b)
	ts, rest, ok := strings.Cut(s, " ")
	if !ok {
		return logLine{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return logLine{}, false
	}
	l := logLine{time: t}
	n := strings.IndexAny(rest, " :")
	if n < 0 {
		n = len(rest)
	}
	l.kind, rest = EventKind(rest[:n]), rest[n:]
	if l.kind == "" {
		return logLine{}, false
	}
	if l.kind == "end" {
		text, ok := strings.CutPrefix(rest, ": ")
		if !ok {
			return logLine{}, false
		}
		if len(text) > maxEndText {
			text = strings.ToValidUTF8(text[:maxEndText], "") + "…"
		}
		l.text = text
		return l, true
	}
	for len(rest) > 0 && rest[0] == ' ' {
		tok := logToken(rest[1:])
		rest = rest[1+len(tok):]
		switch {
		case strings.HasPrefix(tok, "phase="):
			l.phase = strings.TrimPrefix(tok, "phase=")
		case strings.HasPrefix(tok, "attempt="):
			l.attempt, _ = strconv.Atoi(strings.TrimPrefix(tok, "attempt="))
		case strings.HasPrefix(tok, "duration="):
		default:
			a, err := phases.ParseAddress(tok)
			if err != nil {
				return logLine{}, false
			}
			l.addr = a
		}
	}
	if rest != "" && !strings.HasPrefix(rest, ":") {
		return logLine{}, false
	}
	if strings.HasPrefix(string(l.kind), "step_") && l.addr.IsZero() {
		return logLine{}, false
	}
	return l, true
}

// logToken is the token s starts with: up to a space or a colon outside
// quotes (an address's key is quoted, and may hold both).
func logToken(s string) string {
	quoted, esc := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case esc:
			esc = false
		case quoted && c == '\\':
			esc = true
		case c == '"':
			quoted = !quoted
		case !quoted && (c == ' ' || c == ':'):
			return s[:i]
		}
	}
	return s
}
