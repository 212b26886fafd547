package main

import (
	"context"
	"errors"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
)

var errNoEtcd = errors.New("the etcd backend is not built into this migrate yet")

func openEtcd(context.Context, *phases.BackendConfig, state.Options) (stateStore, error) {
	return nil, errNoEtcd
}

func readEtcdLock(context.Context, *phases.BackendConfig) (*state.LockInfo, error) {
	return nil, errNoEtcd
}

func unlockEtcd(context.Context, *phases.BackendConfig, string) error { return errNoEtcd }
