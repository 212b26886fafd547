package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/phases"
)

// integrityDir makes a state as a real run leaves it: a snapshot with
// every kind of field, and a journal of three checkpoints since.
func integrityDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	l := openW(t, dir)
	at := time.Date(2026, 3, 1, 10, 0, 5, 123456789, time.UTC)
	a := rec("exec.backup", Done)
	a.InputHash = "0d1f7e"
	a.Outputs = json.RawMessage(`{"value":{"path":"/var/backups/db.tar","size":42},"type":["object",{"path":"string","size":"number"}]}`)
	a.Private = json.RawMessage(`"b3BhcXVl"`)
	a.Revert = &phases.RevertData{Description: "run ./restore.sh", Data: json.RawMessage(`{"argv":["./restore.sh"]}`)}
	a.StartedAt, a.FinishedAt = &at, &at
	b := rec("approval.dns", Done)
	b.Facts = map[string]string{"approved_by": "alice@laptop"}
	c := rec("http_check.ready", Failed)
	c.LastError = "GET https://example.test/: 503 — unavailable"
	checkpoint(t, l, a, b, c)
	if err := l.Persist(); err != nil {
		t.Fatal(err)
	}
	d := rec("exec.start", Running)
	d.StartedAt = &at
	checkpoint(t, l, d, rec("exec.start", Done), rec("http_check.ready", Done))
	crash(l)
	return dir
}

// TestEveryBitFlipIsRefusedOrHarmless flips, one at a time, every bit of
// a real state.json and of its journal: each flip must make Open refuse
// the state with an UnusableError naming the damaged file, or leave what
// it reads exactly as it was (a key whose case changed, which JSON
// decoding ignores). Never a different state, silently.
func TestEveryBitFlipIsRefusedOrHarmless(t *testing.T) {
	t.Parallel()
	src := integrityDir(t)
	orig := map[string][]byte{
		snapshotFile: readFile(t, filepath.Join(src, snapshotFile)),
		journalFile:  readFile(t, filepath.Join(src, journalFile)),
	}
	want, err := marshalBody(openR(t, src).Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(orig[journalFile], []byte("\n")); n != 3 {
		t.Fatalf("journal has %d lines, want 3", n)
	}
	for _, name := range []string{snapshotFile, journalFile} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			other := snapshotFile
			if name == snapshotFile {
				other = journalFile
			}
			writeFile(t, filepath.Join(dir, other), orig[other])
			path := filepath.Join(dir, name)
			refused, harmless := 0, 0
			for i := range len(orig[name]) {
				for bit := range 8 {
					b := bytes.Clone(orig[name])
					b[i] ^= 1 << bit
					writeFile(t, path, b)
					l, err := Open(dir, Options{})
					if err != nil {
						// A flipped version is refused as a newer one,
						// with its own hint, which still has the backup.
						var ue *UnusableError
						if !errors.As(err, &ue) || ue.Path != path || !strings.Contains(err.Error(), "aside") && !strings.Contains(err.Error(), "cp "+filepath.Join(dir, backupFile)) {
							t.Fatalf("byte %d bit %d: %v, want an UnusableError for %s with the way out", i, bit, err, path)
						}
						refused++
						continue
					}
					got, _ := marshalBody(l.Snapshot())
					if !bytes.Equal(got, want) {
						t.Fatalf("byte %d (%q) bit %d: accepted with a different content:\n%s\nwant\n%s", i, orig[name][i], bit, got, want)
					}
					harmless++
				}
			}
			t.Logf("%s: %d flips refused, %d harmless", name, refused, harmless)
		})
	}
}

func TestJournalOfAnotherStateRefused(t *testing.T) {
	t.Parallel()
	v1 := func(serial int) []byte {
		return []byte(strings.Replace(`{"version":1,"serial":SERIAL,"lineage":"`+testLineage+`","steps":{}}`, "SERIAL", string(rune('0'+serial)), 1))
	}
	legacy := func(seq int, a string) []byte {
		return []byte(`{"seq":` + string(rune('0'+seq)) + `,"time":"2025-03-01T12:00:00Z","step":{"address":"` + a + `","phase":"main","status":"done","attempts":1}}` + "\n")
	}
	for name, tc := range map[string]struct {
		snapshot, journal []byte
		want              string
	}{
		// Every entry is older than the snapshot but they do not end at
		// its serial: today's bug skipped them all, and every step ran
		// again.
		"raised serial": {v1(7), lines(journalLine(1, rec("exec.a", Done)), journalLine(2, rec("exec.b", Done))), "does not belong to this snapshot"},
		"other lineage": {nil, lines(journalLineOf("0123456789abcdef0123456789abcdef", 1, rec("exec.a", Done))), "belongs to another state"},
		"folded, other lineage": {v1(2), lines(journalLineOf("0123456789abcdef0123456789abcdef", 1, rec("exec.a", Done)),
			journalLineOf("0123456789abcdef0123456789abcdef", 2, rec("exec.a", Done))), "belongs to another state"},
		"legacy line after a version 2 snapshot": {nil, legacy(1, "exec.a"), "no checksum"},
		"damaged newline":                        {nil, bytes.Replace(journalLine(1, rec("exec.a", Done)), []byte("\n"), []byte("\x0b"), 1), "instead of a newline"},
		"damaged last line": {nil, lines(journalLine(1, rec("exec.a", Done)),
			bytes.Replace(journalLine(2, rec("exec.b", Done)), []byte("done"), []byte("dome"), 1)), "journal line 2 (byte"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := newStateDir(t, 0, 0)
			if tc.snapshot != nil {
				writeFile(t, filepath.Join(dir, snapshotFile), tc.snapshot)
			}
			writeFile(t, filepath.Join(dir, journalFile), tc.journal)
			before := dirContents(t, dir)
			for _, opts := range []Options{{}, writer("migrate run")} {
				_, err := Open(dir, opts)
				var ue *UnusableError
				if !errors.As(err, &ue) || ue.Path != filepath.Join(dir, journalFile) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Open(lock=%v): %v, want an UnusableError for the journal saying %q", opts.Lock != nil, err, tc.want)
				}
				assertUntouched(t, dir, before)
			}
		})
	}

	// A version 1 snapshot and journal, as the previous migrate left them
	// after a crash, are read and upgraded.
	dir := newStateDir(t, 0, 0)
	writeFile(t, filepath.Join(dir, snapshotFile), v1(1))
	writeFile(t, filepath.Join(dir, journalFile), lines(legacy(1, "exec.a"), legacy(2, "exec.b"), legacy(3, "exec.c")))
	l := openW(t, dir)
	if s := l.Snapshot(); s.Serial != 3 || len(s.Steps) != 2 {
		t.Fatalf("version 1 state: serial %d, %d steps; want 3, 2", s.Serial, len(s.Steps))
	}
	l.Close()
	if b := readFile(t, filepath.Join(dir, snapshotFile)); !bytes.Contains(b, []byte(`"checksum": "sha256:`)) {
		t.Fatalf("not upgraded to version 2:\n%s", b)
	}
}

// What JSON cannot hold as it is (invalid UTF-8 in an error, a command's
// output) is stored as JSON reads it back, so the snapshot's checksum,
// taken of what was written, matches what is read.
func TestRecordsAreStoredAsTheyReadBack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openW(t, dir)
	r := rec("exec.a", Failed)
	r.LastError = "exit 1: \xff\xfe <b>&\u2028"
	r.Facts = map[string]string{"k\xff": "v\xc3"}
	checkpoint(t, l, r)
	got, _ := l.Step(r.Addr)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	reread, ok := openR(t, dir).Step(r.Addr)
	if !ok || reread.LastError != got.LastError || reread.LastError != "exit 1: \uFFFD\uFFFD <b>&\u2028" || reread.Facts["k\uFFFD"] != "v\uFFFD" {
		t.Fatalf("reread %q %q, in memory %q", reread.LastError, reread.Facts, got.LastError)
	}
}

func TestWriteThenReadInvalidUTF8(t *testing.T) {
	t.Parallel()
	r := rec("exec.a", Failed)
	r.LastError = "bad \xff byte"
	b, err := EncodeSnapshot(&Snapshot{Serial: 1, Lineage: testLineage, Steps: map[string]*StepRecord{"exec.a": r}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := DecodeSnapshot(b)
	if err != nil || s.Steps["exec.a"].LastError != "bad \uFFFD byte" {
		t.Fatalf("DecodeSnapshot(EncodeSnapshot(s)): %v, %+v", err, s)
	}
}
