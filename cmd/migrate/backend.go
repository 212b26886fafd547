package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/state/backend"
)

// backendFor chooses the backend (backend.Select): --backend,
// MIGRATE_BACKEND, then the runbook's block (rb may be nil), then the
// local files.
func (a *app) backendFor(rb *phases.Runbook) (backend.Backend, error) {
	c := backend.Choice{Flag: a.backendURL, Env: os.Getenv(backend.EnvURL), Password: a.etcdPassword}
	if rb != nil {
		c.Block = rb.Backend
	}
	b, err := backend.Select(c)
	if err != nil {
		return backend.Backend{}, err
	}
	return a.backend(b)
}

// backend is the backend of c, its local directory the state directory
// unless c names one; the locks it takes are logged. An etcd backend
// without a runbook directory has none (Dir "": no log can be kept).
func (a *app) backend(c *phases.BackendConfig) (backend.Backend, error) {
	dir, err := a.stateDir()
	if c.Type == "local" && c.Path != "" {
		dir, err = c.Path, nil
	}
	if err != nil && c.Type != "etcd" {
		return backend.Backend{}, err
	}
	b := backend.New(c, dir)
	b.Locked = func(where, id string) { a.logger().Info("state locked", "backend", where, "id", id) }
	return b, nil
}

// readPasswordEnv takes the password out of the environment, so that no
// step command or provider program inherits it.
func (a *app) readPasswordEnv() {
	if p, ok := os.LookupEnv(backend.EnvPassword); ok {
		a.etcdPassword = p
		os.Unsetenv(backend.EnvPassword)
	}
}

// filesDir is where providers keep files with the state (a Talos node's
// etcd snapshots): the local state's directory, or the local directory of
// an etcd state's logs; "" when it cannot be told.
func (a *app) filesDir(rb *phases.Runbook) string {
	dir, err := a.stateDir()
	if b := rb.Backend; b != nil && b.Type == "local" && b.Path != "" {
		dir, err = b.Path, nil
	}
	if err != nil {
		return ""
	}
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}

// stateOptions are the options of a state this migrate opens; writable
// ones take the lock, recording the command line.
func stateOptions(writable bool) state.Options {
	opts := state.Options{MigrateVersion: version}
	if writable {
		opts.Lock = state.NewLockInfo(commandLine(os.Args))
	}
	return opts
}

// openState opens the state of the runbook (its backend block, unless
// --backend or MIGRATE_BACKEND say otherwise) read-only, or with the lock
// for a command that writes.
func (a *app) openState(ctx context.Context, rb *phases.Runbook, writable bool) (backend.Store, backend.Backend, error) {
	b, err := a.backendFor(rb)
	if err != nil {
		return nil, b, err
	}
	st, err := b.Open(ctx, stateOptions(writable))
	return st, b, err
}

// closeState persists and unlocks; a failure is shown at once and turns
// success into exit code 1.
func (a *app) closeState(st io.Closer, err *error) {
	if cerr := st.Close(); cerr != nil {
		a.view().Error(fmt.Errorf("saving the state: %w", cerr))
		if *err == nil {
			*err = reported(exitError)
		}
	}
}

// commandLine is the command recorded in the lock: the values of --var
// are left out, as they may be secrets.
func commandLine(args []string) string {
	out := make([]string, 0, len(args))
	hide := false
	for i, s := range args {
		switch {
		case i == 0:
			s = filepath.Base(s)
		case hide:
			name, _, _ := strings.Cut(s, "=")
			s = name + "=…"
			hide = false
		case s == "--var" || s == "-var":
			hide = true
		case strings.HasPrefix(s, "--var=") || strings.HasPrefix(s, "-var="):
			flag, val, _ := strings.Cut(s, "=")
			name, _, _ := strings.Cut(val, "=")
			s = flag + "=" + name + "=…"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// readState loads the runbook and opens its state read-only, with the
// runbook's phases in run order: what status and report read. The
// caller closes the state with closeState.
func (a *app) readState(vf varFlags) (*phases.Runbook, backend.Store, backend.Backend, []*phases.Phase, error) {
	rb, err := a.load(vf)
	if err != nil {
		return nil, nil, backend.Backend{}, nil, err
	}
	st, b, err := a.openState(context.Background(), rb, false)
	if err != nil {
		return nil, nil, backend.Backend{}, nil, err
	}
	order, err := phases.OrderPhases(rb.Phases)
	if err != nil {
		st.Close()
		return nil, nil, backend.Backend{}, nil, err
	}
	return rb, st, b, order.List, nil
}
