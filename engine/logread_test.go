package engine

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/phases"
)

// logOf writes events as the engine's log does, then the session's end
// line when end is not empty.
func logOf(events []Event, end string) []byte {
	var b bytes.Buffer
	for _, e := range events {
		b.Write(logText(e))
	}
	if end != "" {
		last := events[len(events)-1].Time.Add(time.Millisecond)
		b.WriteString(last.UTC().Format(time.RFC3339Nano) + " end: " + end + "\n")
	}
	return b.Bytes()
}

// TestReadLogRoundTrip: what logText writes, ReadLog reads back: every
// attempt with its phase, address (a key with quotes, a space and a
// colon), number, times and outcome; a retried attempt; a revert; the
// lines that continue an event (errors, diffs) are skipped, even one that
// looks like an event.
func TestReadLogRoundTrip(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 123456789, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	odd := phases.Address{Type: "exec", Name: "copy", Key: `a "b": c`}
	grp := phases.Address{Group: "app", GroupKey: "jelly fin", Type: "exec", Name: "stop"}
	ok := phases.Address{Type: "exec", Name: "ok"}
	events := []Event{
		{Kind: PhaseStarted, Time: at(0), Phase: "A"},
		{Kind: StepStarted, Time: at(1), Phase: "A", Addr: ok, Attempt: 1},
		{Kind: StepPlanned, Time: at(1.5), Phase: "A", Addr: odd, Message: "+ x\n" + at(9).Format(time.RFC3339Nano) + " step_done phase=A exec.fake"},
		{Kind: StepStarted, Time: at(2), Phase: "A", Addr: odd, Attempt: 1},
		{Kind: StepOutput, Time: at(2.5), Phase: "A", Addr: odd, Message: "copying: 10%"},
		{Kind: StepDone, Time: at(3), Phase: "A", Addr: ok, Duration: 2 * time.Second},
		{Kind: StepRetrying, Time: at(4), Phase: "A", Addr: odd, Attempt: 1, Error: "boom\nline two", Message: "retrying in 1s"},
		{Kind: StepStarted, Time: at(5), Phase: "A", Addr: odd, Attempt: 2},
		{Kind: StepFailed, Time: at(6), Phase: "A", Addr: odd, Error: "boom again"},
		{Kind: StepSkipped, Time: at(6), Phase: "A", Addr: phases.Address{Type: "exec", Name: "after"}, Message: "a step it depends on failed"},
		{Kind: StepStarted, Time: at(7), Phase: "B", Addr: grp, Attempt: 1},
		{Kind: StepDone, Time: at(8), Phase: "B", Addr: grp},
		{Kind: StepReverting, Time: at(9), Phase: "B", Addr: grp, Message: "start it again"},
		{Kind: StepReverted, Time: at(10), Phase: "B", Addr: grp},
		{Kind: PhaseFailed, Time: at(10), Phase: "B", Error: "phase B did not complete"},
	}
	ls, err := ReadLog("/x/.migrate/logs/20261204T100000.123456789Z-run.log", bytes.NewReader(logOf(events, "exit code 1")))
	if err != nil {
		t.Fatal(err)
	}
	if ls.Command != "run" || !ls.Start.Equal(at(0)) || !ls.End.Equal(at(10).Add(time.Millisecond)) || ls.Ended != "exit code 1" || ls.Killed {
		t.Errorf("session: %+v", ls)
	}
	want := []LogAttempt{
		{Phase: "A", Addr: ok, Attempt: 1, Started: true, Start: at(1), End: at(3), Outcome: StepDone},
		{Phase: "A", Addr: odd, Attempt: 1, Started: true, Start: at(2), End: at(4), Outcome: StepRetrying},
		{Phase: "A", Addr: odd, Attempt: 2, Started: true, Start: at(5), End: at(6), Outcome: StepFailed},
		{Phase: "A", Addr: phases.Address{Type: "exec", Name: "after"}, Start: at(6), End: at(6), Outcome: StepSkipped},
		{Phase: "B", Addr: grp, Attempt: 1, Started: true, Start: at(7), End: at(8), Outcome: StepDone},
		{Phase: "B", Addr: grp, Revert: true, Started: true, Start: at(9), End: at(10), Outcome: StepReverted},
	}
	if len(ls.Attempts) != len(want) {
		t.Fatalf("attempts:\n%+v\nwant\n%+v", ls.Attempts, want)
	}
	for i, a := range ls.Attempts {
		w := want[i]
		if a.Phase != w.Phase || a.Addr != w.Addr || a.Attempt != w.Attempt || a.Revert != w.Revert || a.Started != w.Started ||
			!a.Start.Equal(w.Start) || !a.End.Equal(w.End) || a.Outcome != w.Outcome || a.Killed {
			t.Errorf("attempt %d:\n%+v\nwant\n%+v", i, a, w)
		}
	}
}

// TestReadLogKilled: a log without its end line is a killed command's:
// the attempts it left open end at its last time, killed; the rollback's
// command comes from the name.
func TestReadLogKilled(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	a := phases.Address{Type: "wait", Name: "long"}
	events := []Event{
		{Kind: PhaseRollbackStarted, Time: t0, Phase: "A"},
		{Kind: StepReverting, Time: t0.Add(time.Second), Phase: "A", Addr: a},
		{Kind: StepOutput, Time: t0.Add(3 * time.Second), Phase: "A", Addr: a, Message: "still waiting"},
	}
	ls, err := ReadLog("20261204T100000.000000000Z-rollback.log", bytes.NewReader(logOf(events, "")))
	if err != nil {
		t.Fatal(err)
	}
	if ls.Command != "rollback" || !ls.Killed || ls.Ended != "" || !ls.End.Equal(t0.Add(3*time.Second)) {
		t.Errorf("session: %+v", ls)
	}
	if len(ls.Attempts) != 1 || !ls.Attempts[0].Killed || !ls.Attempts[0].Revert || ls.Attempts[0].Outcome != "" || !ls.Attempts[0].End.Equal(ls.End) {
		t.Errorf("attempts: %+v", ls.Attempts)
	}
}

// TestReadLogGarbage: bad lines are skipped, a line longer than ReadLog
// looks at too; a log with no event at all is an error.
func TestReadLogGarbage(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	ts := func(s int) string { return t0.Add(time.Duration(s) * time.Second).Format(time.RFC3339Nano) }
	log := strings.Join([]string{
		"garbage",
		ts(0) + " step_started phase=A exec.a attempt=1",
		"not-a-time step_done phase=A exec.a",
		ts(1) + " step_done phase=A exec[bad",
		ts(2) + " plan: " + strings.Repeat("x", 3*maxLogLine),
		ts(3) + " step_done phase=A exec.a duration=3s",
		"\x00\xff" + ts(4),
		ts(4) + " end: ok",
		"",
	}, "\n")
	ls, err := ReadLog("x-run.log", strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if ls.Killed || ls.Ended != "ok" || len(ls.Attempts) != 1 || ls.Attempts[0].Outcome != StepDone || !ls.Attempts[0].End.Equal(t0.Add(3*time.Second)) {
		t.Errorf("session: %+v", ls)
	}
	if _, err := ReadLog("x-run.log", strings.NewReader("nothing\n  at all\n")); err == nil {
		t.Error("a log without events: no error")
	}
}

// FuzzReadLog: no input makes ReadLog panic, and what it reads holds
// together: every attempt within the session, ending after it starts.
func FuzzReadLog(f *testing.F) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	a := phases.Address{Type: "exec", Name: "x", Key: `k "1"`}
	f.Add("20261204T100000.000000000Z-run.log", logOf([]Event{
		{Kind: StepStarted, Time: t0, Phase: "A", Addr: a, Attempt: 1},
		{Kind: StepFailed, Time: t0.Add(time.Second), Phase: "A", Addr: a, Error: "no\nway"},
		{Kind: StepReverting, Time: t0.Add(2 * time.Second), Phase: "A", Addr: a},
	}, "exit code 1"))
	f.Add("x-rollback.log", []byte("2026-12-04T10:00:00Z step_reverting phase=A exec.x\n  error: x\n"))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		ls, err := ReadLog(name, bytes.NewReader(data))
		if err != nil {
			return
		}
		if ls.End.Before(ls.Start) {
			t.Fatalf("session ends before it starts: %+v", ls)
		}
		for _, a := range ls.Attempts {
			if a.End.Before(a.Start) || a.Start.Before(ls.Start) || a.End.After(ls.End) {
				t.Fatalf("attempt out of its session: %+v in %+v", a, ls)
			}
		}
	})
}
