package state

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// stepTypes lists the step types of every provider, from the reference
// (docs/reference.md, generated from the providers' schemas).
func stepTypes(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	provider := regexp.MustCompile("^## The `[a-z]+` provider")
	heading := regexp.MustCompile("^### `([a-z_]+)`$")
	var types []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = provider.MatchString(line)
		}
		if m := heading.FindStringSubmatch(line); in && m != nil {
			types = append(types, m[1])
		}
	}
	if len(types) < 20 {
		t.Fatalf("only %d step types in docs/reference.md: %v", len(types), types)
	}
	return types
}

// decodeMap decodes a state file as plain JSON, without its checksum (a
// digest of the rest).
func decodeMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	delete(m, "checksum")
	return m
}

// renamed is a format 2 state decoded as a map, as format 3 says it: the
// version 3 and the two keys of each record renamed, nothing else changed.
func renamed(t *testing.T, v2 map[string]any) map[string]any {
	t.Helper()
	b, _ := json.Marshal(v2)
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	m["version"] = json.Number(strconv.Itoa(CurrentVersion))
	for _, r := range m["steps"].(map[string]any) {
		rec := r.(map[string]any)
		for old, now := range map[string]string{"inverse": "revert", "record": "facts"} {
			if v, ok := rec[old]; ok {
				rec[now] = v
				delete(rec, old)
			}
		}
	}
	return m
}

// A format 2 state with a record of every provider's every step type, each
// revert field filled, is read and written as format 3 with nothing lost:
// as decoded maps, the keys renamed and nothing else changed.
func TestFormat2NothingLost(t *testing.T) {
	t.Parallel()
	golden := readFile(t, "testdata/format2/state.json")
	old := decodeMap(t, golden)
	if old["version"] != json.Number("2") {
		t.Fatalf("testdata/format2/state.json is not format 2")
	}
	steps := old["steps"].(map[string]any)
	for _, typ := range stepTypes(t) {
		rec, ok := steps[typ+".one"].(map[string]any)
		if !ok {
			t.Errorf("testdata/format2/state.json has no record of step type %s (add it to make.py)", typ)
			continue
		}
		if typ != "approval" && rec["inverse"] == nil {
			t.Errorf("%s.one has no revert data", typ)
		}
	}
	if n := strings.Count(string(golden), `"inverse":`); n < 20 {
		t.Fatalf("only %d records with revert data", n)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, snapshotFile), golden)
	// Read (for a status) as it is, then by a writer that writes it as 3.
	r := openR(t, dir)
	if got := r.Snapshot(); len(got.Steps) != len(steps) || got.Steps["approval.one"].Facts["approved_by"] != "alice@laptop" ||
		got.Steps["exec.one"].Revert == nil || !bytes.Contains(got.Steps["exec.one"].Revert.Data, []byte(`"secret_creates":true`)) {
		t.Fatalf("format 2 read as %+v", got.Steps["exec.one"])
	}
	r.Close()
	if !bytes.Equal(readFile(t, filepath.Join(dir, snapshotFile)), golden) {
		t.Fatalf("a reader wrote the state")
	}
	l, err := Open(dir, Options{Lock: &LockInfo{Command: "migrate test"}}) // no MigrateVersion: kept as written
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	written := readFile(t, filepath.Join(dir, snapshotFile))
	if !bytes.HasPrefix(written, fmt.Appendf(nil, "{\n  \"version\": %d,\n", CurrentVersion)) {
		t.Fatalf("the writer did not write format 3:\n%s", written)
	}
	if bytes.Contains(written, []byte(`"inverse"`)) || bytes.Contains(written, []byte(`"record"`)) {
		t.Fatalf("format 3 with an old key:\n%s", written)
	}
	if got, want := decodeMap(t, written), renamed(t, old); !reflect.DeepEqual(got, want) {
		for k, rec := range want["steps"].(map[string]any) {
			if g := got["steps"].(map[string]any)[k]; !reflect.DeepEqual(g, rec) {
				t.Errorf("%s:\n got %v\nwant %v", k, g, rec)
			}
		}
		t.Fatalf("format 3 differs from format 2 with its keys renamed")
	}
	// The previous snapshot, in format 2, is the backup.
	if !bytes.Equal(readFile(t, filepath.Join(dir, backupFile)), golden) {
		t.Errorf("the backup is not the format 2 snapshot")
	}
	// And format 3 reads back to the same records.
	if !reflect.DeepEqual(openR(t, dir).Snapshot().Steps, r.Snapshot().Steps) {
		t.Errorf("format 3 reads back to other records")
	}
}

// journalV2 is the journal lines a format 2 writer appended after its
// snapshot of lineage, serial from, for records (format 2's JSON).
func journalV2(lineage string, from uint64, records ...string) []byte {
	var b []byte
	for i, rec := range records {
		b = appendJournalLine(b, from+uint64(i)+1, lineage, time.Date(2026, 3, 1, 12, 0, i, 0, time.UTC), []byte(rec))
	}
	return b
}

// A format 2 journal (records under "inverse" and "record") after a format
// 2 snapshot is read, and folded into a format 3 snapshot by the writer.
func TestFormat2JournalRead(t *testing.T) {
	t.Parallel()
	golden := readFile(t, "testdata/format2/state.json")
	lineage, serial := "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0", uint64(77)
	recs := []string{
		`{"address":"exec.later","phase":"p0","status":"done","input_hash":"sha256-v2:aa","inverse":{"description":"run: undo","data":{"argv":["undo"]}},"attempts":1,"started_at":"2026-03-01T12:00:00Z","finished_at":"2026-03-01T12:00:01Z"}`,
		`{"address":"approval.one","phase":"p0","status":"done","record":{"approved_by":"bob@desk"},"attempts":2}`,
		`{"address":"wait.one","phase":"p0","status":"running","attempts":2,"holder":{"lock_id":"L","pid":9}}`,
	}
	lines := journalV2(lineage, serial, recs...)

	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, snapshotFile), golden)
	writeFile(t, filepath.Join(dir, journalFile), lines)
	check := func(s *Snapshot) {
		t.Helper()
		if s.Serial != serial+3 {
			t.Errorf("serial %d, want %d", s.Serial, serial+3)
		}
		later := s.Steps["exec.later"]
		if later == nil || later.Revert == nil || later.Revert.Description != "run: undo" || string(later.Revert.Data) != `{"argv":["undo"]}` {
			t.Errorf("exec.later: %+v", later)
		}
		if f := s.Steps["approval.one"].Facts; !reflect.DeepEqual(f, map[string]string{"approved_by": "bob@desk"}) {
			t.Errorf("approval.one's facts: %v", f)
		}
		if h := s.Steps["wait.one"].Holder; h == nil || h.LockID != "L" || h.PID != 9 {
			t.Errorf("wait.one's holder: %+v", h)
		}
	}
	check(openR(t, dir).Snapshot())
	l := openW(t, dir)
	check(l.Snapshot())
	l.Close()
	written := readFile(t, filepath.Join(dir, snapshotFile))
	if !bytes.HasPrefix(written, fmt.Appendf(nil, "{\n  \"version\": %d,\n", CurrentVersion)) || bytes.Contains(written, []byte(`"inverse"`)) {
		t.Fatalf("not folded into format 3:\n%s", written)
	}
	if j := readFile(t, filepath.Join(dir, journalFile)); len(j) != 0 {
		t.Errorf("journal not folded: %s", j)
	}
	check(openR(t, dir).Snapshot())

	// A crash between the first format 3 snapshot's rename and the
	// journal's truncation leaves format 2 lines the snapshot holds: read.
	writeFile(t, filepath.Join(dir, journalFile), lines)
	check(openR(t, dir).Snapshot())
	// A format 2 line the format 3 snapshot does not hold is refused.
	more := journalV2(lineage, serial+3, `{"address":"exec.x","phase":"p0","status":"done","inverse":{"description":"d"},"attempts":1}`)
	writeFile(t, filepath.Join(dir, journalFile), append(lines, more...))
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "state format 2") {
		t.Errorf("a format 2 line after a format 3 snapshot: %v", err)
	}
	// Format 3 lines carry the new keys.
	writeFile(t, filepath.Join(dir, journalFile), nil)
	l = openW(t, dir)
	rec := l.Snapshot().Steps["exec.later"]
	rec.Attempts++
	if err := l.Checkpoint(rec); err != nil {
		t.Fatal(err)
	}
	if j := readFile(t, filepath.Join(dir, journalFile)); !bytes.Contains(j, []byte(`"revert":{"description":"run: undo"`)) {
		t.Errorf("a format 3 journal line: %s", j)
	}
	l.Close()
}

// DecodeEntryOf reads an entry in the format of the snapshot before it.
func TestDecodeEntryOf(t *testing.T) {
	t.Parallel()
	line := journalV2("ab", 0, `{"address":"exec.a","phase":"p","status":"done","inverse":{"description":"d","data":{"x":1}},"record":{"k":"v"},"attempts":1}`)
	line = bytes.TrimSuffix(line, []byte("\n"))
	e, err := DecodeEntryOf(line, 2)
	if err != nil || e.Step.Revert == nil || string(e.Step.Revert.Data) != `{"x":1}` || e.Step.Facts["k"] != "v" {
		t.Fatalf("DecodeEntryOf(2): %+v %v", e.Step, err)
	}
	if _, err := DecodeEntryOf(line, 3); err == nil {
		t.Errorf("a format 2 entry after a format 3 snapshot was read")
	}
	if _, err := DecodeEntry(line); err == nil {
		t.Errorf("DecodeEntry read a format 2 entry as the current format")
	}
}
