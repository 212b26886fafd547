package sqlitefile_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/inventory/sqlitefile"
)

// makeDB has the real SQLite (python3's sqlite3 module) run script in a
// new database and copy it, with its write-ahead log if any, while the
// connection is still open (closing would checkpoint the log into the
// file). It returns the copies' paths ("" for no log) and the rows the
// real SQLite selects with query, as JSON.
func makeDB(t *testing.T, pragmas, script, query string) (db, wal string, want [][]any) {
	t.Helper()
	dir := t.TempDir()
	py := `import json, shutil, sqlite3, sys, os
src, dst, pragmas, script, query = sys.argv[1:]
c = sqlite3.connect(src, isolation_level=None)
c.executescript(pragmas)
c.executescript(script)
rows = [list(r) for r in c.execute(query)]
shutil.copy(src, dst)
if os.path.exists(src + "-wal"):
    shutil.copy(src + "-wal", dst + "-wal")
print(json.dumps(rows))
`
	src, dst := filepath.Join(dir, "src.db"), filepath.Join(dir, "copy.db")
	out, err := exec.Command("python3", "-c", py, src, dst, pragmas, script, query).CombinedOutput()
	if err != nil {
		t.Fatalf("python3's sqlite3: %v\n%s", err, out)
	}
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if _, err := os.Stat(dst + "-wal"); err == nil {
		wal = dst + "-wal"
	}
	return dst, wal, want
}

func open(t *testing.T, db, wal string) *sqlitefile.DB {
	t.Helper()
	f, err := os.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	fi, _ := f.Stat()
	var w *os.File
	var wsize int64
	if wal != "" {
		if w, err = os.Open(wal); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		wfi, _ := w.Stat()
		wsize = wfi.Size()
	}
	var wr interface {
		ReadAt([]byte, int64) (int, error)
	}
	if w != nil {
		wr = w
	}
	d, err := sqlitefile.Open(f, fi.Size(), wr, wsize)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// asJSON makes the reader's values comparable with what python printed.
func asJSON(t *testing.T, rows [][]any) [][]any {
	t.Helper()
	b, err := json.Marshal(rows)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]any
	_ = json.Unmarshal(b, &out)
	return out
}

// TestSelectAsSQLiteDoes: tables written by the real SQLite read back as
// it selects them: Jellyfin's Users as EF Core creates it, thousands of
// rows over interior pages, values spilling onto overflow pages, a rowid
// alias, a column added after rows were written, UTF-16 text, the
// smallest and largest page sizes, and rows only the write-ahead log
// holds.
func TestSelectAsSQLiteDoes(t *testing.T) {
	t.Parallel()
	users := `CREATE TABLE "Users" ("Id" TEXT NOT NULL CONSTRAINT "PK_Users" PRIMARY KEY, "Username" TEXT NOT NULL COLLATE NOCASE, "Password" TEXT NULL, "MustUpdatePassword" INTEGER NOT NULL, "RowVersion" INTEGER NOT NULL);
INSERT INTO Users VALUES ('4b7c', 'ana', '$PBKDF2$secret', 0, 1), ('9e1f', 'ben', NULL, 1, 7);`
	many := `CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, score REAL, blob BLOB, big INTEGER);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 3000)
INSERT INTO t SELECT i, 'user-' || i || CASE WHEN i % 500 = 0 THEN printf('%.*c', 70000, 'x') ELSE '' END, i * 1.5, randomblob(i % 7), -i * 100000000000 FROM n;`
	for _, tc := range []struct {
		name, pragmas, script, query, table string
		columns                             []string
	}{
		{"jellyfin users", "", users, "SELECT Username, MustUpdatePassword FROM Users ORDER BY rowid", "Users", []string{"Username", "MustUpdatePassword"}},
		{"many rows and overflow", "", many, "SELECT id, name, score, big FROM t ORDER BY id", "t", []string{"id", "name", "score", "big"}},
		{"page size 512", "PRAGMA page_size=512;", many, "SELECT id, name FROM t ORDER BY id", "t", []string{"id", "name"}},
		{"page size 65536", "PRAGMA page_size=65536;", many, "SELECT name FROM t ORDER BY id", "t", []string{"name"}},
		{"added column", "", "CREATE TABLE a (x TEXT); INSERT INTO a VALUES ('old'); ALTER TABLE a ADD COLUMN y INTEGER; INSERT INTO a VALUES ('new', 2);", "SELECT x, y FROM a ORDER BY rowid", "a", []string{"x", "y"}},
		{"utf-16", "PRAGMA encoding='UTF-16be';", "CREATE TABLE u (name TEXT); INSERT INTO u VALUES ('Ana'), ('Bjørn'), ('灰色');", "SELECT name FROM u ORDER BY rowid", "u", []string{"name"}},
		{"write-ahead log", "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;", users + many + "DELETE FROM Users WHERE Username = 'ana'; INSERT INTO Users VALUES ('c0de', 'cleo', NULL, 0, 1);", "SELECT Username FROM Users ORDER BY rowid", "Users", []string{"Username"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, wal, want := makeDB(t, tc.pragmas, tc.script, tc.query)
			if strings.Contains(tc.pragmas, "WAL") && wal == "" {
				t.Fatal("the copy has no write-ahead log: the case tests nothing")
			}
			got, err := open(t, db, wal).Select(tc.table, tc.columns...)
			if err != nil {
				t.Fatal(err)
			}
			if g := asJSON(t, got); !reflect.DeepEqual(g, want) {
				t.Errorf("%d rows read, SQLite selects %d; first difference: %s", len(g), len(want), firstDiff(g, want))
			}
		})
	}
}

func firstDiff(got, want [][]any) string {
	for i := range min(len(got), len(want)) {
		if !reflect.DeepEqual(got[i], want[i]) {
			return fmt.Sprintf("row %d: %.200v, want %.200v", i, got[i], want[i])
		}
	}
	return "lengths"
}

// TestWALWithoutItsCommit: a transaction whose commit frame is torn off
// (the copy caught it mid-write) is not read, as SQLite does not.
func TestWALWithoutItsCommit(t *testing.T) {
	t.Parallel()
	db, wal, want := makeDB(t, "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;",
		"CREATE TABLE u (name TEXT); INSERT INTO u VALUES ('ana'); INSERT INTO u VALUES ('ben');", "SELECT name FROM u")
	b, err := os.ReadFile(wal)
	if err != nil {
		t.Fatal(err)
	}
	// Cut the log inside its last frame: the commit is torn off.
	if err := os.WriteFile(wal, b[:len(b)-100], 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := open(t, db, wal).Select("u", "name")
	if err != nil {
		t.Fatal(err)
	}
	if g := asJSON(t, got); !reflect.DeepEqual(g, want[:1]) {
		t.Errorf("read %v; SQLite selects %v once both commit, %v before the second", g, want, want[:1])
	}
}

// TestRefusals: what is not a database, a table or column that is not
// there, and a WITHOUT ROWID table are errors that say so.
func TestRefusals(t *testing.T) {
	t.Parallel()
	notDB := filepath.Join(t.TempDir(), "x.db")
	_ = os.WriteFile(notDB, []byte("SQLite format 3\x00 the rooms, but not a database"), 0o600)
	f, _ := os.Open(notDB)
	defer f.Close()
	if _, err := sqlitefile.Open(f, 40, nil, 0); !errors.Is(err, sqlitefile.ErrNotSQLite) {
		t.Errorf("a short file: %v", err)
	}
	db, _, _ := makeDB(t, "", "CREATE TABLE k (a TEXT PRIMARY KEY, b TEXT) WITHOUT ROWID; CREATE TABLE u (name TEXT);", "SELECT 1")
	d := open(t, db, "")
	for table, want := range map[string]string{"k": "WITHOUT ROWID", "nope": "no table nope", "u": "no column Username"} {
		if _, err := d.Select(table, "Username"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Select(%s): %v, want an error saying %q", table, err, want)
		}
	}
}

// TestCorruptNeverPanics: a damaged copy is an error, never a panic nor
// an endless walk: every byte of a small database set to 0xff in turn.
func TestCorruptNeverPanics(t *testing.T) {
	t.Parallel()
	db, _, _ := makeDB(t, "PRAGMA page_size=512;", `CREATE TABLE u (name TEXT); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 60)
INSERT INTO u SELECT printf('%.*c', i * 13, 'n') FROM n;`, "SELECT 1")
	orig, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	for i := range orig {
		b := append([]byte(nil), orig...)
		b[i] = 0xff
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("byte %d set to 0xff: panic %v", i, r)
				}
			}()
			d, err := sqlitefile.Open(bytesReaderAt(b), int64(len(b)), nil, 0)
			if err == nil {
				_, _ = d.Select("u", "name")
			}
		}()
	}
}

type bytesReaderAt []byte

func (b bytesReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, errors.New("EOF")
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, errors.New("EOF")
	}
	return n, nil
}
