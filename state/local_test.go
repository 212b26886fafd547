package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/phases"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	ins, err := filepath.Glob("testdata/roundtrip/v*-*.in.json")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no fixtures in testdata/roundtrip: %v", err)
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".in.json")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			golden := strings.TrimSuffix(in, ".in.json") + ".out.json"
			got := roundTrip(t, readFile(t, in))
			if *update {
				writeFile(t, golden, got)
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v\nto create it: go test ./state/ -run 'TestRoundTrip/%s' -update", err, name)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s round-trips to\n%s\nwant (%s)\n%s\nif the change is intended: go test ./state/ -run 'TestRoundTrip/%s' -update",
					in, got, golden, want, name)
			}
			// The output is a fixed point.
			if again := roundTrip(t, got); !bytes.Equal(again, got) {
				t.Fatalf("%s does not round-trip to itself:\n%s", golden, again)
			}
		})
	}
}

// roundTrip opens in as state.json for writing, persists and returns what
// was written.
func roundTrip(t *testing.T, in []byte) []byte {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, snapshotFile), in)
	l := openW(t, dir)
	l.mu.Lock()
	l.dirty = true // force a write even though nothing changed
	l.mu.Unlock()
	if err := l.Persist(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return readFile(t, filepath.Join(dir, snapshotFile))
}

func TestNewStateAndReopen(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "rb", ".migrate")
	l := openW(t, dir)
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("state dir: %v %v, want mode 0700", fi.Mode(), err)
	}
	lineage := l.Lineage()
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(lineage) {
		t.Fatalf("lineage %q, want 128 random bits in hex", lineage)
	}
	// The lineage is on disk from the start.
	if r := openR(t, dir); r.Lineage() != lineage {
		t.Fatalf("read-only Open sees lineage %q, want %q", r.Lineage(), lineage)
	}
	now := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	a := rec("exec.a", Done)
	a.StartedAt, a.FinishedAt = &now, &now
	a.Outputs = json.RawMessage(`{"value":"x","type":"string"}`)
	checkpoint(t, l, rec("exec.a", Running), a, rec("exec.b", Failed))
	if s := l.Snapshot(); s.Serial != 3 || len(s.Steps) != 2 {
		t.Fatalf("serial %d, %d steps; want 3, 2", s.Serial, len(s.Steps))
	}
	for _, name := range []string{snapshotFile, journalFile, lockFile} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", name, fi.Mode(), err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := l.Checkpoint(rec("exec.c", Done)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Checkpoint after Close: %v, want ErrClosed", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, journalFile)); err != nil || fi.Size() != 0 {
		t.Fatalf("journal after Close: %v, want empty", err)
	}
	if _, err := os.Stat(filepath.Join(dir, lockFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock file after Close: %v, want removed", err)
	}
	r := openR(t, dir)
	s := r.Snapshot()
	if s.Serial != 3 || s.Lineage != lineage || s.MigrateVersion != "test" {
		t.Fatalf("reopened: serial %d lineage %q migrate_version %q", s.Serial, s.Lineage, s.MigrateVersion)
	}
	got, ok := r.Step(addr("exec.a"))
	if !ok || !reflect.DeepEqual(got, a) {
		t.Fatalf("exec.a reopened = %+v, want %+v", got, a)
	}
}

func TestReadOnlyWritesNothing(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nothing-here")
	r := openR(t, missing)
	if s := r.Snapshot(); s.Serial != 0 || s.Lineage != "" || len(s.Steps) != 0 {
		t.Fatalf("state of a missing dir: %+v", s)
	}
	if err := r.Checkpoint(rec("exec.a", Done)); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Checkpoint read-only: %v, want ErrReadOnly", err)
	}
	if err := r.Persist(); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Persist read-only: %v, want ErrReadOnly", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read-only Open created %s", missing)
	}

	// An existing state with a journal and a torn tail: seen, not touched.
	dir := t.TempDir()
	l := openW(t, dir)
	checkpoint(t, l, rec("exec.a", Done), rec("exec.b", Running))
	crash(l)
	f, _ := os.OpenFile(filepath.Join(dir, journalFile), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"seq":3,"ti`)
	f.Close()
	before := dirContents(t, dir)
	r = openR(t, dir)
	if s := r.Snapshot(); s.Serial != 2 || s.Steps["exec.b"].Status != Running {
		t.Fatalf("read-only after crash: serial %d, steps %v", s.Serial, s.Steps)
	}
	r.Close()
	assertUntouched(t, dir, before)
}

func TestJournalReplayAfterCrash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openW(t, dir)
	lineage := l.Lineage()
	checkpoint(t, l, rec("exec.a", Running), rec("exec.a", Done), rec("exec.b", Running))
	crash(l)
	if n := bytes.Count(readFile(t, filepath.Join(dir, journalFile)), []byte("\n")); n != 3 {
		t.Fatalf("journal has %d lines, want 3", n)
	}

	l = openW(t, dir) // the lock died with the "process"
	s := l.Snapshot()
	if s.Serial != 3 || s.Lineage != lineage || s.Steps["exec.a"].Status != Done || s.Steps["exec.b"].Status != Running {
		t.Fatalf("after replay: serial %d lineage %s steps %v", s.Serial, s.Lineage, s.Steps)
	}
	// Open folded the journal into the snapshot.
	if b := readFile(t, filepath.Join(dir, journalFile)); len(b) != 0 {
		t.Fatalf("journal after writable Open: %q, want empty", b)
	}
	checkpoint(t, l, rec("exec.b", Done))
	crash(l)
	if s := openR(t, dir).Snapshot(); s.Serial != 4 || s.Steps["exec.b"].Status != Done {
		t.Fatalf("second replay: serial %d steps %v", s.Serial, s.Steps)
	}
}

func TestTornLastLineIgnored(t *testing.T) {
	t.Parallel()
	for name, tail := range map[string]string{
		"no newline":      `{"seq":3,"time":"2025-03-01T12:00:00Z","step":{"address":"exec.c","phase":"main","status":"do`,
		"complete no nl":  string(bytes.TrimSuffix(journalLine(3, rec("exec.c", Done)), []byte("\n"))),
		"garbage newline": "\x00\x00\x00\x00\n",
		"nuls":            "\x00\x00\x00\x00\x00\x00",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := newStateDir(t, 0, 0)
			j := lines(journalLine(1, rec("exec.a", Done)), journalLine(2, rec("exec.b", Done)), []byte(tail))
			writeFile(t, filepath.Join(dir, journalFile), j)
			if s := openR(t, dir).Snapshot(); s.Serial != 2 || len(s.Steps) != 2 {
				t.Fatalf("read-only: serial %d, %d steps; want 2, 2", s.Serial, len(s.Steps))
			}
			if got := readFile(t, filepath.Join(dir, journalFile)); !bytes.Equal(got, j) {
				t.Fatalf("read-only Open changed the journal")
			}
			l := openW(t, dir)
			if b := readFile(t, filepath.Join(dir, journalFile)); len(b) != 0 {
				t.Fatalf("torn tail not truncated away: %q", b)
			}
			checkpoint(t, l, rec("exec.c", Failed))
			crash(l)
			s := openR(t, dir).Snapshot()
			if s.Serial != 3 || s.Steps["exec.c"].Status != Failed {
				t.Fatalf("after a checkpoint past the torn tail: serial %d steps %v", s.Serial, s.Steps)
			}
		})
	}
}

func TestCorruptJournalRefused(t *testing.T) {
	t.Parallel()
	for name, j := range map[string][]byte{
		"garbage middle": lines(journalLine(1, rec("exec.a", Done)), []byte("not json\n"), journalLine(3, rec("exec.c", Done))),
		"unknown status": lines([]byte(`{"seq":1,"time":"2025-03-01T12:00:00Z","step":{"address":"exec.a","status":"weird"}}`+"\n"), journalLine(2, rec("exec.b", Done))),
		"gap":            lines(journalLine(1, rec("exec.a", Done)), journalLine(3, rec("exec.c", Done))),
		"reordered":      lines(journalLine(2, rec("exec.a", Done)), journalLine(1, rec("exec.c", Done))),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := newStateDir(t, 0, 0)
			writeFile(t, filepath.Join(dir, journalFile), j)
			before := dirContents(t, dir)
			for _, opts := range []Options{{}, writer("migrate run")} {
				_, err := Open(dir, opts)
				var ue *UnusableError
				if !errors.As(err, &ue) || !errors.Is(err, ErrUnusableState) {
					t.Fatalf("Open(lock=%v): %v, want an UnusableError", opts.Lock != nil, err)
				}
				if ue.Path != filepath.Join(dir, journalFile) || !strings.Contains(err.Error(), "move "+ue.Path+" aside") {
					t.Fatalf("error does not name the journal and the way out: %v", err)
				}
				assertUntouched(t, dir, before)
			}
			// The failed writable Open released its lock.
			if info, err := ReadLock(dir); info != nil || err != nil {
				t.Fatalf("ReadLock after failed Open: %v, %v", info, err)
			}
		})
	}
}

func TestCrashBetweenRenameAndTruncate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openW(t, dir)
	checkpoint(t, l, rec("exec.a", Running), rec("exec.a", Done), rec("exec.b", Done))
	oldJournal := readFile(t, filepath.Join(dir, journalFile))
	if err := l.Persist(); err != nil {
		t.Fatal(err)
	}
	crash(l)
	// The truncation was lost; the snapshot (serial 3) already holds all
	// three entries. One more, made after, comes after them.
	writeFile(t, filepath.Join(dir, journalFile), lines(oldJournal, journalLineOf(l.Lineage(), 4, rec("exec.a", Reverted))))
	for _, opts := range []Options{{}, writer("migrate run")} {
		l, err := Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		s := l.Snapshot()
		if s.Serial != 4 || s.Steps["exec.a"].Status != Reverted || s.Steps["exec.b"].Status != Done {
			t.Fatalf("lock=%v: serial %d (want 4), steps %v", opts.Lock != nil, s.Serial, s.Steps)
		}
		l.Close()
	}
}

func TestPersistKeepsBackup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openW(t, dir)
	checkpoint(t, l, rec("exec.a", Done))
	first := readFile(t, filepath.Join(dir, snapshotFile))
	if err := l.Persist(); err != nil {
		t.Fatal(err)
	}
	second := readFile(t, filepath.Join(dir, snapshotFile))
	if got := readFile(t, filepath.Join(dir, backupFile)); !bytes.Equal(got, first) {
		t.Fatalf("backup is\n%s\nwant the previous snapshot\n%s", got, first)
	}
	// Nothing new: no write, the backup stays.
	if err := l.Persist(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	openW(t, dir).Close()
	if got := readFile(t, filepath.Join(dir, backupFile)); !bytes.Equal(got, first) {
		t.Fatalf("a Persist with nothing new replaced the backup")
	}
	if got := readFile(t, filepath.Join(dir, snapshotFile)); !bytes.Equal(got, second) {
		t.Fatalf("a Persist with nothing new rewrote the snapshot")
	}
	if fi, err := os.Stat(filepath.Join(dir, backupFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup: %v %v, want mode 0600", fi.Mode(), err)
	}
}

func TestNewerVersionRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := []byte(`{"version": 5, "serial": 9, "lineage": "x", "migrate_version": "2.3.0", "steps": {}, "new_thing": [1]}`)
	writeFile(t, filepath.Join(dir, snapshotFile), in)
	before := dirContents(t, dir)
	for _, opts := range []Options{{}, writer("migrate run")} {
		_, err := Open(dir, opts)
		var nv *NewerVersionError
		if !errors.As(err, &nv) || nv.Version != 5 || nv.MigrateVersion != "2.3.0" || !errors.Is(err, ErrUnusableState) {
			t.Fatalf("Open: %v, want a NewerVersionError", err)
		}
		for _, want := range []string{"version 5", "migrate 2.3.0", "upgrade migrate"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		assertUntouched(t, dir, before)
	}
}

func TestUnusableSnapshotRefused(t *testing.T) {
	t.Parallel()
	valid := `{"version":1,"serial":1,"lineage":"ab","steps":{"exec.a":{"address":"exec.a","phase":"p","status":"done","attempts":1}}}`
	for name, in := range map[string]string{
		"garbage":          "\x7fELF\x02\x01\x01",
		"truncated":        valid[:len(valid)/2],
		"empty":            "",
		"not an object":    `[1,2,3]`,
		"no version":       `{"serial":1,"lineage":"ab","steps":{}}`,
		"version string":   `{"version":"1","serial":1,"lineage":"ab","steps":{}}`,
		"version zero":     `{"version":0,"serial":1,"lineage":"ab","steps":{}}`,
		"unknown field":    `{"version":1,"serial":1,"lineage":"ab","steps":{},"extra":true}`,
		"trailing data":    valid + `{}`,
		"no lineage":       `{"version":1,"serial":1,"steps":{}}`,
		"null record":      `{"version":1,"serial":1,"lineage":"ab","steps":{"exec.a":null}}`,
		"key mismatch":     strings.Replace(valid, `{"exec.a":`, `{"exec.b":`, 1),
		"bad address":      strings.ReplaceAll(valid, `exec.a`, `nodot`),
		"unknown status":   strings.Replace(valid, `"done"`, `"finished"`, 1),
		"negative serial":  strings.Replace(valid, `"serial":1`, `"serial":-1`, 1),
		"bad time":         strings.Replace(valid, `"attempts":1`, `"attempts":1,"started_at":"yesterday"`, 1),
		"bad record field": strings.Replace(valid, `"attempts":1`, `"attempts":"many"`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, snapshotFile)
			writeFile(t, path, []byte(in))
			before := dirContents(t, dir)
			for _, opts := range []Options{{}, writer("migrate run")} {
				_, err := Open(dir, opts)
				var ue *UnusableError
				if !errors.As(err, &ue) || ue.Path != path {
					t.Fatalf("Open(lock=%v): %v, want an UnusableError for %s", opts.Lock != nil, err, path)
				}
				msg := err.Error()
				if !strings.Contains(msg, path) || !strings.Contains(msg, "cp "+filepath.Join(dir, backupFile)) || !strings.Contains(msg, "aside") {
					t.Fatalf("error does not say how to recover: %s", msg)
				}
				assertUntouched(t, dir, before)
			}
		})
	}
	// The control: the valid one opens.
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, snapshotFile), []byte(valid))
	openR(t, dir)
}

func TestJournalWithoutSnapshotRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, journalFile), journalLine(1, rec("exec.a", Done)))
	before := dirContents(t, dir)
	for _, opts := range []Options{{}, writer("migrate run")} {
		if _, err := Open(dir, opts); !errors.Is(err, ErrUnusableState) {
			t.Fatalf("Open: %v, want an UnusableError", err)
		}
		assertUntouched(t, dir, before)
	}
}

func TestConcurrentCheckpoints(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openW(t, dir)
	const workers, each = 10, 30
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				r := rec(fmt.Sprintf("exec.w%d", w), Running)
				r.Attempts = i + 1
				if err := l.Checkpoint(r); err != nil {
					t.Error(err)
					return
				}
				// What returned is visible.
				if got, ok := l.Step(r.Addr); !ok || got.Attempts != i+1 {
					t.Errorf("Step(%s) after its checkpoint: %v %v", r.Addr, got, ok)
				}
			}
		})
	}
	// Persist concurrently too.
	wg.Go(func() {
		for range 3 {
			if err := l.Persist(); err != nil {
				t.Error(err)
			}
			time.Sleep(time.Millisecond)
		}
	})
	wg.Wait()
	l.mu.Lock()
	syncs := l.syncs
	l.mu.Unlock()
	t.Logf("%d checkpoints from %d goroutines in %d journal syncs", workers*each, workers, syncs)
	if syncs > workers*each {
		t.Fatalf("%d syncs for %d checkpoints", syncs, workers*each)
	}
	crash(l) // no final Persist: the journal must hold the rest
	s := openR(t, dir).Snapshot()
	if s.Serial != workers*each || len(s.Steps) != workers {
		t.Fatalf("serial %d, %d steps; want %d, %d", s.Serial, len(s.Steps), workers*each, workers)
	}
	for k, r := range s.Steps {
		if r.Attempts != each {
			t.Errorf("%s: attempts %d, want the last one, %d", k, r.Attempts, each)
		}
	}
}

// TestRecordIsVisibleAtOnceAndSyncedByTheNextCheckpoint: a step's start
// is written without a sync of its own; it survives the process at once,
// and the next checkpoint's sync carries it to disk.
func TestRecordIsVisibleAtOnceAndSyncedByTheNextCheckpoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, err := Open(dir, writer("migrate run"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.CheckpointUnsynced(rec("exec.a", Running)); err != nil {
		t.Fatal(err)
	}
	if l.datasyncs != 0 {
		t.Errorf("Record synced (%d syncs)", l.datasyncs)
	}
	// Another process (the next run after a kill -9) sees it.
	ro, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, ok := ro.Step(phases.Address{Type: "exec", Name: "a"})
	ro.Close()
	if !ok || got.Status != Running {
		t.Fatalf("a reader sees %+v, want the running record", got)
	}
	if err := l.Checkpoint(rec("exec.a", Done)); err != nil {
		t.Fatal(err)
	}
	if l.datasyncs != 1 {
		t.Errorf("Checkpoint: %d syncs, want 1", l.datasyncs)
	}
}

// TestReaderDuringWrites: a read-only Open while a writer checkpoints and
// persists (truncating the journal) always sees a consistent state.
func TestReaderDuringWrites(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openW(t, dir)
	const n = 200
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			checkpoint(t, l, rec(fmt.Sprintf("exec.s%d", i%7), Done))
			if i%10 == 0 {
				if err := l.Persist(); err != nil {
					t.Error(err)
				}
			}
		}
	}()
	var last uint64
	for reading := true; reading; {
		select {
		case <-done:
			reading = false
		default:
		}
		r, err := Open(dir, Options{})
		if err != nil {
			t.Fatalf("read-only Open during writes: %v", err)
		}
		s := r.Snapshot()
		if s.Serial < last {
			t.Fatalf("serial went back from %d to %d", last, s.Serial)
		}
		last = s.Serial
	}
	l.Close()
	if s := openR(t, dir).Snapshot(); s.Serial != n {
		t.Fatalf("serial %d, want %d", s.Serial, n)
	}
}

// TestExpectRefusesBeforeWriting: a writer whose Expect refuses the state
// read under the lock leaves the snapshot and the journal as they were
// (no fold), and the lock free for the next one.
func TestExpectRefusesBeforeWriting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openW(t, dir)
	checkpoint(t, l, rec("exec.a", Running), rec("exec.a", Done))
	crash(l) // the journal holds two lines the next writer would fold
	snapshot, journal := readFile(t, filepath.Join(dir, snapshotFile)), readFile(t, filepath.Join(dir, journalFile))

	refusal := errors.New("the state changed since the plan")
	var seen uint64
	opts := writer("migrate run")
	opts.Expect = func(s *Snapshot) error { seen = s.Serial; return refusal }
	if _, err := Open(dir, opts); !errors.Is(err, refusal) {
		t.Fatalf("Open with a refusing Expect: %v, want the refusal", err)
	}
	if seen != 2 {
		t.Errorf("Expect saw serial %d, want 2 (the journal replayed)", seen)
	}
	if b := readFile(t, filepath.Join(dir, snapshotFile)); !bytes.Equal(b, snapshot) {
		t.Errorf("the snapshot was rewritten by a refused writer:\nbefore %s\nafter  %s", snapshot, b)
	}
	if b := readFile(t, filepath.Join(dir, journalFile)); !bytes.Equal(b, journal) {
		t.Errorf("the journal was folded by a refused writer: %q, was %q", b, journal)
	}
	openW(t, dir).Close() // the lock was released
}
