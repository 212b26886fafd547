package inventory

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/homelab-migrate/migrate/inventory/sqlitefile"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// maxDatabase bounds the copy of a database init pulls to read: an
// application's account database is kilobytes to a few megabytes.
const maxDatabase = 512 << 20

// sqliteColumn reads one text column of a table of an SQLite database in
// the VM: the file (and its write-ahead log, which holds the newest
// pages while the application runs) is pulled through the files API
// into temporary files of this machine and read there, so nothing runs
// in the VM and a VM without python3 or sqlite3 is read all the same.
func (v vm) sqliteColumn(db, table, column string) ([]string, error) {
	dbFile, dbSize, err := v.pull(db)
	if err != nil {
		return nil, err
	}
	defer dbFile.Close()
	var wal io.ReaderAt
	walFile, walSize, err := v.pull(db + "-wal")
	switch {
	case err == nil:
		defer walFile.Close()
		wal = walFile
	case !errors.Is(err, errNoFile):
		return nil, err
	}
	d, err := sqlitefile.Open(dbFile, dbSize, wal, walSize)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", db, err)
	}
	rows, err := d.Select(table, column)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", db, err)
	}
	var out []string
	for _, r := range rows {
		if s, ok := r[0].(string); ok && s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

var errNoFile = errors.New("no such file")

// pull copies a file of the VM into an unnamed temporary file (removed
// at once: it lives until closed), refusing one over maxDatabase.
func (v vm) pull(p string) (*os.File, int64, error) {
	fi, r, _, err := v.c.GetFile(v.ctx, v.name, p)
	if err != nil {
		if incusapi.IsNotFound(err) {
			return nil, 0, errNoFile
		}
		return nil, 0, fmt.Errorf("pulling %s: %w", p, err)
	}
	if r == nil || fi.Type != "file" {
		if r != nil {
			r.Close()
		}
		return nil, 0, fmt.Errorf("%s is not a file", p)
	}
	defer r.Close()
	f, err := os.CreateTemp("", "migrate-init-*.db")
	if err != nil {
		return nil, 0, err
	}
	os.Remove(f.Name())
	n, err := io.Copy(f, io.LimitReader(r, maxDatabase+1))
	if err == nil && n > maxDatabase {
		err = fmt.Errorf("%s is larger than %d MiB: not pulled", p, maxDatabase>>20)
	}
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("pulling %s: %w", p, err)
	}
	return f, n, nil
}
