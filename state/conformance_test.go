package state_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/state/statetest"
)

// TestConformance runs the suite every backend passes on Local.
func TestConformance(t *testing.T) {
	statetest.Run(t, func(t *testing.T) statetest.Backend {
		dir := filepath.Join(t.TempDir(), ".migrate")
		return statetest.Backend{
			Open: func(opts state.Options) (statetest.Store, error) {
				l, err := state.Open(dir, opts)
				if err != nil {
					return nil, err
				}
				t.Cleanup(func() { l.Close() })
				return l, nil
			},
			ReadLock: func() (*state.LockInfo, error) { return state.ReadLock(dir) },
			Unlock:   func(id string) error { return state.Unlock(dir, id) },
			Dump: func() map[string]string {
				m := map[string]string{}
				ents, err := os.ReadDir(dir)
				if errors.Is(err, os.ErrNotExist) {
					return m
				}
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range ents {
					if e.IsDir() {
						continue
					}
					b, err := os.ReadFile(filepath.Join(dir, e.Name()))
					if err != nil {
						t.Fatal(err)
					}
					m[e.Name()] = string(b)
				}
				return m
			},
		}
	})
}
