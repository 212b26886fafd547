package backend

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/state/etcdstate"
)

// The environment variables of the backend. The etcd password comes from
// the block or EnvPassword, never a URL (URLs end up in shell histories
// and process lists).
const (
	EnvURL      = "MIGRATE_BACKEND"
	EnvPassword = "MIGRATE_ETCD_PASSWORD"
)

// MinLockTTL is etcd's shortest lease (runbooks.MinLockTTL, the same
// bound on the block's lock_ttl).
const MinLockTTL = 2 * time.Second

// Store is the state as the commands use it, local or in etcd.
type Store interface {
	state.Manager
	Lineage() string
	LockInfo() *state.LockInfo
	// Import replaces the whole state (state push and pull), refusing,
	// unless force, a target of another lineage or a newer serial.
	Import(snap *state.Snapshot, force bool) error
}

var (
	_ Store = (*state.Local)(nil)
	_ Store = (*etcdstate.Store)(nil)
)

// LosesLock is a state whose lock can be lost while it is held: etcd's,
// whose lease a sleeping laptop or a state unlock ends. (A local state's
// flock lasts as long as the process.)
type LosesLock interface {
	Lost() <-chan struct{}
	LostCause() error
}

// Parse reads a backend URL: "local" (the state directory), "local:PATH",
// or etcd://[USER@]HOST:PORT[,HOST:PORT...]/PREFIX/?ca=&cert=&key=&user=&lock_ttl=&insecure=.
// what names where it came from, for errors.
func Parse(s, what string) (*phases.BackendConfig, error) {
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
		return nil, bad("the URL holds a password: give it in %s instead, never in a URL", EnvPassword)
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
			if err != nil || d < MinLockTTL {
				return nil, bad("lock_ttl=%s: want a duration of at least %s, such as 30s", v, MinLockTTL)
			}
			b.LockTTL = d
		case "password":
			return nil, bad("the URL holds a password: give it in %s instead, never in a URL", EnvPassword)
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

// Choice is what chooses a backend, in rising precedence: the runbook's
// block, the environment's URL, the flag's URL; and the password of
// EnvPassword.
type Choice struct {
	Flag     string                // --backend
	Env      string                // MIGRATE_BACKEND
	Block    *phases.BackendConfig // the runbook's backend block, or nil
	Password string                // MIGRATE_ETCD_PASSWORD
}

// Select chooses the backend: the flag, the environment, then the
// runbook's block, then the local files. An etcd user needs a password.
func Select(c Choice) (*phases.BackendConfig, error) {
	var b *phases.BackendConfig
	switch {
	case c.Flag != "":
		var err error
		if b, err = Parse(c.Flag, "--backend"); err != nil {
			return nil, err
		}
	case c.Env != "":
		var err error
		if b, err = Parse(c.Env, EnvURL); err != nil {
			return nil, err
		}
	case c.Block != nil:
		b = c.Block
		if len(b.Unknown) > 0 {
			return nil, fmt.Errorf("the runbook's backend block (%s) uses variables without a value for %s: give them with MIGRATE_VAR_NAME, or choose the backend with --backend",
				b.Range, strings.Join(b.Unknown, ", "))
		}
	default:
		b = &phases.BackendConfig{Type: "local"}
	}
	b = WithPassword(b, c.Password)
	if b.Type == "etcd" && b.Username != "" && b.Password == "" {
		return nil, fmt.Errorf("%s: user %q needs a password: set %s (or password in the runbook's backend block)", Describe(b, ""), b.Username, EnvPassword)
	}
	return b, nil
}

// WithPassword gives an etcd backend the password (of EnvPassword).
func WithPassword(b *phases.BackendConfig, password string) *phases.BackendConfig {
	if b.Type != "etcd" || password == "" {
		return b
	}
	c := *b
	c.Password = password
	return &c
}

// Describe names a backend for messages, never with its password; dir is
// a local backend's directory.
func Describe(b *phases.BackendConfig, dir string) string {
	if b.Type == "etcd" {
		return fmt.Sprintf("etcd %s, prefix %q", strings.Join(b.Endpoints, ","), b.Prefix)
	}
	return dir
}

// etcdConfig is the etcdstate configuration of an etcd backend.
func etcdConfig(b *phases.BackendConfig) etcdstate.Config {
	return etcdstate.Config{
		Endpoints: b.Endpoints,
		Prefix:    b.Prefix,
		CA:        b.CA, Cert: b.Cert, Key: b.Key,
		Username: b.Username, Password: b.Password,
		Insecure: b.Insecure,
		LockTTL:  b.LockTTL,
	}
}

// Warning is what every plan says of b when it is an etcd backend spoken
// to without TLS by its own choice (insecure = true), "" otherwise.
func Warning(b *phases.BackendConfig) string {
	if b == nil || b.Type != "etcd" || !b.Insecure || !etcdConfig(b).Plaintext() {
		return ""
	}
	what := "the state"
	if b.Password != "" {
		what = fmt.Sprintf("the password of user %q and the state", b.Username)
	}
	return fmt.Sprintf("the state in %s is spoken to without TLS (insecure = true): %s cross the network in clear, readable and changeable on the way; give the cluster's CA in ca (and https:// endpoints) to use TLS",
		Describe(b, ""), what)
}

// Backend is a chosen backend, ready to open.
type Backend struct {
	Config *phases.BackendConfig
	// Dir is the local directory: the state's for a local backend, where
	// an etcd backend's commands keep their logs.
	Dir string
	// Locked, when set, is told of each lock taken (for the log).
	Locked func(where, id string)
}

// New is the backend of c; dir is the local state directory unless c
// names its own (local:PATH).
func New(c *phases.BackendConfig, dir string) Backend {
	if c.Type == "local" && c.Path != "" {
		dir = c.Path
	}
	return Backend{Config: c, Dir: dir}
}

// String names the backend for messages, never with its password.
func (b Backend) String() string { return Describe(b.Config, b.Dir) }

// Where names the backend's state for messages: the clean directory of a
// local state.
func (b Backend) Where() string {
	if b.Config.Type == "local" {
		return filepath.Clean(b.Dir)
	}
	return b.String()
}

// Open opens the state read-only, or with the lock when opts.Lock is set;
// a locked state that opts.Expect refuses is closed unchanged.
func (b Backend) Open(ctx context.Context, opts state.Options) (Store, error) {
	var st Store
	var err error
	if b.Config.Type == "etcd" {
		st, err = etcdstate.Open(ctx, etcdConfig(b.Config), opts)
	} else {
		st, err = state.Open(b.Dir, opts)
	}
	if err != nil {
		// etcdstate's errors name the endpoints themselves.
		var le *state.LockedError
		if b.Config.Type == "etcd" && !errors.As(err, &le) && !strings.Contains(err.Error(), b.Config.Endpoints[0]) {
			err = fmt.Errorf("state in %s: %w", b, err)
		}
		return nil, err
	}
	if opts.Lock != nil && b.Locked != nil {
		b.Locked(b.String(), st.LockInfo().ID)
	}
	return st, nil
}

// ReadLock says who holds the lock of the state, nil when nobody does.
func (b Backend) ReadLock(ctx context.Context) (*state.LockInfo, error) {
	if b.Config.Type == "etcd" {
		return etcdstate.ReadLock(ctx, etcdConfig(b.Config))
	}
	return state.ReadLock(b.Dir)
}

// Unlock breaks the lock of the state if its ID is id.
func (b Backend) Unlock(ctx context.Context, id string) error {
	if b.Config.Type == "etcd" {
		return etcdstate.Unlock(ctx, etcdConfig(b.Config), id)
	}
	return state.Unlock(b.Dir, id)
}
