package state

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestCutError(t *testing.T) {
	t.Parallel()
	if got := CutError("short", "/x.log"); got != "short" {
		t.Errorf("a short error was changed: %q", got)
	}
	exact := strings.Repeat("a", MaxErrorBytes)
	if got := CutError(exact, ""); got != exact {
		t.Errorf("an error of exactly MaxErrorBytes was cut")
	}
	// "é" is two bytes: the cut falls inside one and must not split it.
	long := "x" + strings.Repeat("é", MaxErrorBytes)
	got := CutError(long, ".migrate/logs/a.log")
	if !utf8.ValidString(got) {
		t.Fatalf("cut inside a character: %q", got[len(got)-80:])
	}
	head, rest, ok := strings.Cut(got, "… (")
	if !ok || len(head) > MaxErrorBytes*3/4 || !strings.HasPrefix(long, head) {
		t.Fatalf("head cut to %d bytes, not a prefix of at most %d", len(head), MaxErrorBytes*3/4)
	}
	note, tail, ok := strings.Cut(rest, ") …")
	if !ok || !strings.HasSuffix(long, tail) || len(tail) > MaxErrorBytes/4 || len(tail) < MaxErrorBytes/4-2 {
		t.Fatalf("the tail (%d bytes) is not the end of the error", len(tail))
	}
	if want := fmt.Sprintf("%d bytes cut; full error in .migrate/logs/a.log", len(long)-len(head)-len(tail)); note != want {
		t.Errorf("cut error says %q, want %q", note, want)
	}
}

func TestOpenLogKeepsTheNewest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var paths []string
	for range KeepLogs + 3 {
		l, err := OpenLog(dir, "run")
		if err != nil {
			t.Fatal(err)
		}
		l.Write([]byte("event\n"))
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, l.Path())
	}
	logs, _ := filepath.Glob(filepath.Join(dir, LogsDir, "*-run.log"))
	if len(logs) != KeepLogs || logs[0] != paths[3] || logs[len(logs)-1] != paths[len(paths)-1] {
		t.Fatalf("kept %d logs from %v, want the %d newest of %v", len(logs), logs, KeepLogs, paths)
	}
	fi, err := os.Stat(logs[0])
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("log: %v %v, want mode 0600", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(dir, LogsDir)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("logs dir: %v %v, want mode 0700", fi.Mode(), err)
	}
}

// A log made by NewLog creates nothing until Open: a command that refuses
// before it writes leaves no file.
func TestNewLogCreatesNothingUntilOpen(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), ".migrate")
	l := NewLog(dir, "run")
	l.Write([]byte("dropped\n"))
	if l.Path() != "" {
		t.Errorf("Path before Open = %q", l.Path())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a log never opened made %s: %v", dir, err)
	}
	l = NewLog(dir, "run")
	if err := l.Open(); err != nil {
		t.Fatal(err)
	}
	l.Write([]byte("kept\n"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(l.Path()); err != nil || string(b) != "kept\n" {
		t.Errorf("log %s = %q, %v", l.Path(), b, err)
	}
}

// A record's error is never kept whole: not from a caller that did not cut
// it, nor from a version 1 state, which kept 50 MB of one.
func TestLastErrorIsBounded(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("z", 1<<20)
	dir := newStateDir(t, 0, 0)
	writeFile(t, filepath.Join(dir, snapshotFile), []byte(`{"version":1,"serial":1,"lineage":"`+testLineage+
		`","steps":{"exec.a":{"address":"exec.a","phase":"p","status":"failed","attempts":1,"last_error":"`+huge+`"}}}`))
	l := openW(t, dir)
	r := rec("exec.b", Failed)
	r.LastError = huge
	checkpoint(t, l, r)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if b := readFile(t, filepath.Join(dir, snapshotFile)); len(b) > 3*MaxErrorBytes {
		t.Fatalf("state.json has %d bytes", len(b))
	}
	s := openR(t, dir).Snapshot()
	for _, a := range []string{"exec.a", "exec.b"} {
		if e := s.Steps[a].LastError; len(e) > MaxErrorBytes+100 || !strings.HasPrefix(e, huge[:MaxErrorBytes*3/4]+"… (") {
			t.Errorf("%s: last_error of %d bytes, not cut", a, len(e))
		}
	}
}

// TestLogFlushesWithoutLaterWrites: an event written and followed by
// none (a run killed during a long step) reaches the file within
// logFlushEvery, without Close.
func TestLogFlushesWithoutLaterWrites(t *testing.T) {
	t.Parallel()
	l, err := OpenLog(t.TempDir(), "run")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Write([]byte("2026-12-04T10:00:00Z step_started phase=A wait.long attempt=1\n"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(l.Path())
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "step_started") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the event is not in the file after 10s: %q", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
