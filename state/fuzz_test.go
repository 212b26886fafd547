package state

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzRead feeds arbitrary bytes as state.json and journal.jsonl. Open
// must not panic; read-only it must change nothing; for writing, it either
// fails and changes nothing, or what it folds is what a reader sees next.
func FuzzRead(f *testing.F) {
	snap := []byte(`{"version":1,"serial":2,"lineage":"` + testLineage + `","migrate_version":"0.1.0","steps":{"exec.a":{"address":"exec.a","phase":"p","status":"done","attempts":1}}}`)
	v2, err := EncodeSnapshot(&Snapshot{Serial: 2, Lineage: testLineage, Steps: map[string]*StepRecord{"exec.a": rec("exec.a", Done)}})
	if err != nil {
		f.Fatal(err)
	}
	good := lines(journalLine(3, rec("exec.a", Reverted)), journalLine(4, rec("exec.b", Running)))
	f.Add(snap, []byte{})
	f.Add(snap, good)
	f.Add(v2, good)
	f.Add(v2, lines(journalLine(1, rec("exec.a", Running)), journalLine(2, rec("exec.a", Done))))
	f.Add(snap, append(good, `{"seq":5,"ti`...))
	f.Add(snap, lines(journalLine(1, rec("exec.a", Running)), good))
	f.Add(snap, lines(journalLine(3, rec("exec.a", Done)), []byte("{}\n"), journalLine(4, rec("exec.a", Done))))
	f.Add([]byte(`{"version":3,"migrate_version":"9"}`), good)
	f.Add([]byte(`{"version":1`), []byte("\n\n"))
	f.Add([]byte{}, good)
	f.Add([]byte("null"), []byte("null\n"))
	f.Fuzz(func(t *testing.T, snapshot, journal []byte) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, snapshotFile), snapshot)
		writeFile(t, filepath.Join(dir, journalFile), journal)
		before := dirContents(t, dir)

		r, rerr := Open(dir, Options{})
		assertUntouched(t, dir, before)
		var want *Snapshot
		if rerr == nil {
			want = r.Snapshot()
			r.Close()
		}

		w, err := Open(dir, writer("fuzz"))
		if err != nil {
			if rerr == nil {
				t.Fatalf("read-only Open succeeded, writable failed: %v", err)
			}
			assertUntouched(t, dir, before)
			return
		}
		if rerr != nil {
			t.Fatalf("writable Open succeeded, read-only failed: %v", rerr)
		}
		got := w.Snapshot()
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if got.Serial != want.Serial || len(got.Steps) != len(want.Steps) {
			t.Fatalf("writable Open sees serial %d, %d steps; read-only saw %d, %d", got.Serial, len(got.Steps), want.Serial, len(want.Steps))
		}
		again, err := Open(dir, Options{})
		if err != nil {
			t.Fatalf("reopening what was folded: %v", err)
		}
		if s := again.Snapshot(); s.Serial != want.Serial || len(s.Steps) != len(want.Steps) {
			t.Fatalf("reopened: serial %d, %d steps; want %d, %d", s.Serial, len(s.Steps), want.Serial, len(want.Steps))
		}
		if fi, err := os.Stat(filepath.Join(dir, journalFile)); err != nil || fi.Size() != 0 {
			t.Fatalf("journal not folded: %v", err)
		}
	})
}
