package state

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/phases"
)

func writer(command string) Options {
	return Options{Lock: &LockInfo{Command: command}, MigrateVersion: "test"}
}

func openW(t testing.TB, dir string) *Local {
	t.Helper()
	l, err := Open(dir, writer("migrate test"))
	if err != nil {
		t.Fatalf("Open(%s) for writing: %v", dir, err)
	}
	return l
}

func openR(t testing.TB, dir string) *Local {
	t.Helper()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open(%s) read-only: %v", dir, err)
	}
	return l
}

func addr(s string) phases.Address {
	a, err := phases.ParseAddress(s)
	if err != nil {
		panic(err)
	}
	return a
}

func rec(a string, status Status) *StepRecord {
	return &StepRecord{Addr: addr(a), Phase: "main", Status: status, Attempts: 1}
}

func checkpoint(t testing.TB, l *Local, recs ...*StepRecord) {
	t.Helper()
	for _, r := range recs {
		if err := l.Checkpoint(r); err != nil {
			t.Fatalf("Checkpoint(%s): %v", r.Addr, err)
		}
	}
}

// crash abandons l as a killed process would: its journal and lock file
// are closed (the kernel releases the flock) with nothing persisted.
func crash(l *Local) {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.journal.Close()
	l.lock.Close()
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// dirContents maps every file name in dir to its bytes.
func dirContents(t testing.TB, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range ents {
		m[e.Name()] = string(readFile(t, filepath.Join(dir, e.Name())))
	}
	return m
}

func assertUntouched(t testing.TB, dir string, before map[string]string) {
	t.Helper()
	after := dirContents(t, dir)
	for name, b := range before {
		if a, ok := after[name]; !ok {
			t.Errorf("%s was removed", name)
		} else if a != b {
			t.Errorf("%s was modified:\nbefore %q\nafter  %q", name, b, a)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			t.Errorf("%s was created", name)
		}
	}
}

// testLineage is the lineage of newStateDir's states and journalLine's lines.
const testLineage = "c0ffee00c0ffee00c0ffee00c0ffee00"

func journalLine(seq uint64, r *StepRecord) []byte {
	return journalLineOf(testLineage, seq, r)
}

func journalLineOf(lineage string, seq uint64, r *StepRecord) []byte {
	step, err := marshalRecord(r)
	if err != nil {
		panic(err)
	}
	return appendJournalLine(nil, seq, lineage, time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC), step)
}

func lines(ls ...[]byte) []byte { return bytes.Join(ls, nil) }

// newStateDir writes a snapshot of serial with n done steps into a new
// directory.
func newStateDir(t testing.TB, serial uint64, n int) string {
	t.Helper()
	dir := t.TempDir()
	s := &Snapshot{Serial: serial, Lineage: testLineage, Steps: map[string]*StepRecord{}}
	for i := range n {
		r := rec("exec.s"+strconv.Itoa(i), Done)
		s.Steps[r.Addr.String()] = r
	}
	b, err := EncodeSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, snapshotFile), b)
	return dir
}
