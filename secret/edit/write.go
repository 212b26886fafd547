package edit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/homelab-migrate/migrate/state"
)

// WriteFile writes b to path 0600 through a temporary file beside it, so
// that path is either the old file or the new one; without replace it
// fails when path exists.
func WriteFile(path string, b []byte, replace bool) error {
	if !replace {
		return WriteNew(NewFile{path, b})
	}
	return state.WriteFile(path, b) // as the state's snapshot is replaced
}

// NewFile is a file WriteNew writes.
type NewFile struct {
	Path string
	Body []byte
}

// WriteNew writes files 0600, each new (never replacing one), all or
// none: each is written and synced to a temporary file beside it first,
// then linked in place; when one cannot be, those linked before it are
// removed again.
func WriteNew(files ...NewFile) error {
	var tmps, linked []string
	defer func() {
		for _, t := range tmps {
			os.Remove(t)
		}
	}()
	for _, f := range files {
		tmp, err := writeTemp(f.Path, f.Body)
		if err != nil {
			return err
		}
		tmps = append(tmps, tmp)
	}
	for i, f := range files {
		if err := os.Link(tmps[i], f.Path); err != nil {
			for _, l := range linked {
				os.Remove(l)
			}
			if errors.Is(err, os.ErrExist) {
				return fmt.Errorf("%s exists already: not overwriting it (nothing was written)", f.Path)
			}
			return err
		}
		linked = append(linked, f.Path)
	}
	for _, f := range files {
		if err := syncDir(filepath.Dir(f.Path)); err != nil {
			return err
		}
	}
	return nil
}

// writeTemp writes b to a new 0600 temporary file beside path, synced,
// and returns its name.
func writeTemp(path string, b []byte) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return "", err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// syncDir makes a rename or link in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
