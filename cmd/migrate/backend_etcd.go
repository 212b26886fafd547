package main

import (
	"context"
	"fmt"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/state/etcdstate"
)

var _ stateStore = (*etcdstate.Store)(nil)

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

func openEtcd(ctx context.Context, b *phases.BackendConfig, opts state.Options) (stateStore, error) {
	return etcdstate.Open(ctx, etcdConfig(b), opts)
}

func readEtcdLock(ctx context.Context, b *phases.BackendConfig) (*state.LockInfo, error) {
	return etcdstate.ReadLock(ctx, etcdConfig(b))
}

func unlockEtcd(ctx context.Context, b *phases.BackendConfig, id string) error {
	return etcdstate.Unlock(ctx, etcdConfig(b), id)
}

// backendWarning is what every plan says of b when it is an etcd backend
// spoken to without TLS by its own choice (insecure = true), "" otherwise.
func backendWarning(b *phases.BackendConfig) string {
	if b == nil || b.Type != "etcd" || !b.Insecure || !etcdConfig(b).Plaintext() {
		return ""
	}
	what := "the state"
	if b.Password != "" {
		what = fmt.Sprintf("the password of user %q and the state", b.Username)
	}
	return fmt.Sprintf("the state in %s is spoken to without TLS (insecure = true): %s cross the network in clear, readable and changeable on the way; give the cluster's CA in ca (and https:// endpoints) to use TLS",
		describe(b, ""), what)
}
