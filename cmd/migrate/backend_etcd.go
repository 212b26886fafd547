package main

import (
	"context"

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
		LockTTL: b.LockTTL,
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
