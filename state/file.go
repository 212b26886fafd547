package state

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Names of the files in a state directory.
const (
	snapshotFile = "state.json"
	backupFile   = "state.json.backup"
	journalFile  = "journal.jsonl"
	lockFile     = "lock"
	tmpSuffix    = ".tmp-"
)

// writeAtomic replaces dir/name with data: a temporary file in the same
// directory is written, synced and closed, then renamed over the target, and
// the directory is synced. A reader sees the old file or the new one, never
// a mix, and after a crash the target is one of the two.
func writeAtomic(dir, name string, data []byte) (err error) {
	f, err := os.CreateTemp(dir, name+tmpSuffix+"*") // mode 0600
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(dir)
}

// WriteFile replaces the file at path with data as the snapshot is
// replaced (see writeAtomic): readable by its owner only, never seen half
// written, durable once it returns. Saved plans use it too.
func WriteFile(path string, data []byte) error {
	return writeAtomic(filepath.Dir(path), filepath.Base(path), data)
}

// backupSnapshot makes dir/state.json.backup the current dir/state.json (a
// hard link, so no copy; a copy where links are not supported). The caller
// syncs the directory.
func backupSnapshot(dir string) error {
	cur := filepath.Join(dir, snapshotFile)
	tmp := filepath.Join(dir, backupFile+tmpSuffix+RandomHex(8))
	if err := os.Link(cur, tmp); err == nil {
		if err := os.Rename(tmp, filepath.Join(dir, backupFile)); err != nil {
			os.Remove(tmp)
			return err
		}
		return nil
	} else if errors.Is(err, os.ErrNotExist) {
		return nil // nothing to back up
	}
	b, err := os.ReadFile(cur)
	if err != nil {
		return err
	}
	return writeAtomic(dir, backupFile, b)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// removeTemps deletes temporary files left by a crash during writeAtomic or
// backupSnapshot.
func removeTemps(dir string) {
	for _, name := range []string{snapshotFile, backupFile} {
		tmps, _ := filepath.Glob(filepath.Join(dir, name+tmpSuffix+"*"))
		for _, t := range tmps {
			os.Remove(t)
		}
	}
}

// RandomHex returns n random bytes in hex.
func RandomHex(n int) string {
	b := make([]byte, n)
	if _, err := io.ReadFull(rand.Reader, b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return hex.EncodeToString(b)
}

// NewLineage returns a random 128-bit identifier for a new state.
func NewLineage() string { return RandomHex(16) }
