package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/runbooks"
	"github.com/homelab-migrate/migrate/state"
)

// Where the state lives, in rising precedence: the local files (default),
// the runbook's backend block, MIGRATE_BACKEND, --backend. The etcd
// password comes from the block or MIGRATE_ETCD_PASSWORD, never a URL
// (URLs end up in shell histories and process lists).
const (
	backendEnv  = "MIGRATE_BACKEND"
	passwordEnv = "MIGRATE_ETCD_PASSWORD"
)

// minLockTTL is etcd's shortest lease.
const minLockTTL = runbooks.MinLockTTL

// stateStore is the state as the commands use it, local or in etcd.
type stateStore interface {
	state.Manager
	Lineage() string
	LockInfo() *state.LockInfo
	// Import replaces the whole state (state push and pull), refusing,
	// unless force, a target of another lineage or a newer serial.
	Import(snap *state.Snapshot, force bool) error
}

var _ stateStore = (*state.Local)(nil)

// parseBackend reads a backend URL: "local" (the state directory),
// "local:PATH", or
// etcd://[USER@]HOST:PORT[,HOST:PORT...]/PREFIX/?ca=&cert=&key=&user=&lock_ttl=&insecure=.
// what names where it came from, for errors.
func parseBackend(s, what string) (*phases.BackendConfig, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: %s", what, fmt.Sprintf(format, args...))
	}
	switch {
	case s == "local":
		return &phases.BackendConfig{Type: "local"}, nil
	case strings.HasPrefix(s, "local:"):
		p := strings.TrimPrefix(s, "local:")
		if p == "" {
			return nil, bad("local:PATH needs a directory")
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, bad("%v", err)
		}
		return &phases.BackendConfig{Type: "local", Path: abs}, nil
	case !strings.HasPrefix(s, "etcd://"):
		scheme, _, _ := strings.Cut(s, ":")
		return nil, bad("unknown backend %q: want local, local:PATH or etcd://HOST:PORT,.../PREFIX/?ca=...&cert=...&key=...&user=...&lock_ttl=...", scheme)
	}
	rest := strings.TrimPrefix(s, "etcd://")
	rest, query, _ := strings.Cut(rest, "?")
	hosts, prefix, _ := strings.Cut(rest, "/")
	user, hosts, hasUser := strings.Cut(hosts, "@")
	if !hasUser {
		hosts, user = user, ""
	}
	if strings.Contains(user, ":") {
		return nil, bad("the URL holds a password: give it in %s instead, never in a URL", passwordEnv)
	}
	b := &phases.BackendConfig{Type: "etcd", Prefix: prefix, Username: user}
	for _, e := range strings.Split(hosts, ",") {
		if e == "" {
			return nil, bad("an empty endpoint in %q: want etcd://HOST:PORT,HOST:PORT/PREFIX/", hosts)
		}
		b.Endpoints = append(b.Endpoints, e)
	}
	if prefix == "" {
		return nil, bad("no key prefix: want etcd://%s/PREFIX/, such as etcd://%s/migrate/homelab/", hosts, hosts)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, bad("%v", err)
	}
	for key, vals := range q {
		v := vals[len(vals)-1]
		switch key {
		case "ca":
			b.CA = v
		case "cert":
			b.Cert = v
		case "key":
			b.Key = v
		case "user":
			b.Username = v
		case "insecure":
			insecure, err := strconv.ParseBool(v)
			if err != nil {
				return nil, bad("insecure=%s: want true or false", v)
			}
			b.Insecure = insecure
		case "lock_ttl":
			d, err := time.ParseDuration(v)
			if err != nil || d < minLockTTL {
				return nil, bad("lock_ttl=%s: want a duration of at least %s, such as 30s", v, minLockTTL)
			}
			b.LockTTL = d
		case "password":
			return nil, bad("the URL holds a password: give it in %s instead, never in a URL", passwordEnv)
		default:
			return nil, bad("unknown parameter %q: the parameters are ca, cert, key, user, lock_ttl and insecure", key)
		}
	}
	for _, p := range []*string{&b.CA, &b.Cert, &b.Key} {
		if *p != "" {
			if *p, err = filepath.Abs(*p); err != nil {
				return nil, bad("%v", err)
			}
		}
	}
	if (b.Cert == "") != (b.Key == "") {
		return nil, bad("a client certificate needs both cert and key")
	}
	return b, nil
}

// backendFor chooses the backend: --backend, MIGRATE_BACKEND, then the
// runbook's block (rb may be nil), then the local files.
func (a *app) backendFor(rb *phases.Runbook) (*phases.BackendConfig, error) {
	var b *phases.BackendConfig
	switch {
	case a.backendURL != "":
		var err error
		if b, err = parseBackend(a.backendURL, "--backend"); err != nil {
			return nil, err
		}
	case os.Getenv(backendEnv) != "":
		var err error
		if b, err = parseBackend(os.Getenv(backendEnv), backendEnv); err != nil {
			return nil, err
		}
	case rb != nil && rb.Backend != nil:
		b = rb.Backend
		if len(b.Unknown) > 0 {
			return nil, fmt.Errorf("the runbook's backend block (%s) uses variables without a value for %s: give them with MIGRATE_VAR_NAME, or choose the backend with --backend",
				b.Range, strings.Join(b.Unknown, ", "))
		}
	default:
		b = &phases.BackendConfig{Type: "local"}
	}
	b = a.withPassword(b)
	if b.Type == "etcd" && b.Username != "" && b.Password == "" {
		return nil, fmt.Errorf("%s: user %q needs a password: set %s (or password in the runbook's backend block)", describe(b, ""), b.Username, passwordEnv)
	}
	return b, nil
}

// withPassword gives an etcd backend the password of MIGRATE_ETCD_PASSWORD.
func (a *app) withPassword(b *phases.BackendConfig) *phases.BackendConfig {
	if b.Type != "etcd" || a.etcdPassword == "" {
		return b
	}
	c := *b
	c.Password = a.etcdPassword
	return &c
}

// readPasswordEnv takes the password out of the environment, so that no
// step command or provider program inherits it.
func (a *app) readPasswordEnv() {
	if p, ok := os.LookupEnv(passwordEnv); ok {
		a.etcdPassword = p
		os.Unsetenv(passwordEnv)
	}
}

// localDir is the directory of a local backend; also where an etcd
// backend's commands keep their logs.
func (a *app) localDir(b *phases.BackendConfig) (string, error) {
	if b != nil && b.Type == "local" && b.Path != "" {
		return b.Path, nil
	}
	return a.stateDir()
}

// filesDir is where providers keep files with the state (a Talos node's
// etcd snapshots): the local state's directory, or the local directory of
// an etcd state's logs; "" when it cannot be told.
func (a *app) filesDir(rb *phases.Runbook) string {
	dir, err := a.localDir(rb.Backend)
	if err != nil {
		return ""
	}
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}

// describe names a backend for messages, never with its password.
func describe(b *phases.BackendConfig, dir string) string {
	if b.Type == "etcd" {
		return fmt.Sprintf("etcd %s, prefix %q", strings.Join(b.Endpoints, ","), b.Prefix)
	}
	return dir
}

// openBackend opens the state of b read-only, or with the lock when
// writable.
func (a *app) openBackend(ctx context.Context, b *phases.BackendConfig, writable bool) (stateStore, error) {
	return a.openBackendExpecting(ctx, b, writable, nil)
}

// openBackendExpecting is openBackend with state.Options.Expect: a
// writable state that expect refuses is closed unchanged.
func (a *app) openBackendExpecting(ctx context.Context, b *phases.BackendConfig, writable bool, expect func(*state.Snapshot) error) (stateStore, error) {
	opts := state.Options{MigrateVersion: version, Expect: expect}
	if writable {
		opts.Lock = state.NewLockInfo(commandLine(os.Args))
	}
	dir, err := a.localDir(b)
	if err != nil {
		return nil, err
	}
	var st stateStore
	if b.Type == "etcd" {
		st, err = openEtcd(ctx, b, opts)
	} else {
		st, err = state.Open(dir, opts)
	}
	if err != nil {
		// etcdstate's errors name the endpoints themselves.
		var le *state.LockedError
		if b.Type == "etcd" && !errors.As(err, &le) && !strings.Contains(err.Error(), b.Endpoints[0]) {
			err = fmt.Errorf("state in %s: %w", describe(b, dir), err)
		}
		return nil, err
	}
	if writable {
		a.logger().Info("state locked", "backend", describe(b, dir), "id", st.LockInfo().ID)
	}
	return st, nil
}

// readLock says who holds the lock of b's state, nil when nobody does.
func (a *app) readLock(ctx context.Context, b *phases.BackendConfig) (*state.LockInfo, error) {
	if b.Type == "etcd" {
		return readEtcdLock(ctx, b)
	}
	dir, err := a.localDir(b)
	if err != nil {
		return nil, err
	}
	return state.ReadLock(dir)
}

// unlock breaks the lock of b's state if its ID is id.
func (a *app) unlock(ctx context.Context, b *phases.BackendConfig, id string) error {
	if b.Type == "etcd" {
		return unlockEtcd(ctx, b, id)
	}
	dir, err := a.localDir(b)
	if err != nil {
		return err
	}
	return state.Unlock(dir, id)
}

// openState opens the state of the runbook (its backend block, unless
// --backend or MIGRATE_BACKEND say otherwise) read-only, or with the lock
// for a command that writes.
func (a *app) openState(ctx context.Context, rb *phases.Runbook, writable bool) (stateStore, *phases.BackendConfig, error) {
	b, err := a.backendFor(rb)
	if err != nil {
		return nil, nil, err
	}
	st, err := a.openBackend(ctx, b, writable)
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
