package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state/backend"
)

// moveCommands are state push and state pull: the state copied between
// the configured backend and another (local to etcd when a team grows).
func (a *app) moveCommands() []*cobra.Command {
	var to, from string
	var force bool
	push := &cobra.Command{
		Use:   "push --to URL",
		Short: "Copy the state to another backend (local to etcd when a team grows)",
		Long: `Copy the whole state of the configured backend (--backend, MIGRATE_BACKEND,
the runbook's backend block, or the local files) to the backend at URL:
local, local:PATH or etcd://HOST:PORT,.../PREFIX/?ca=&cert=&key=&user=&lock_ttl=
(the password in MIGRATE_ETCD_PASSWORD). Both states are locked meanwhile.
A target holding another state (another lineage) or a newer one (a higher
serial) is refused unless --force.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			src, err := a.stateBackend()
			if err != nil {
				return err
			}
			dst, err := backend.Parse(to, "--to")
			if err != nil {
				return err
			}
			return a.move(src.Config, backend.WithPassword(dst, a.etcdPassword), force)
		},
	}
	push.Flags().StringVar(&to, "to", "", "the backend `URL` to copy the state to")
	push.Flags().BoolVar(&force, "force", false, "overwrite a target of another lineage or a newer serial")
	_ = push.MarkFlagRequired("to")
	pull := &cobra.Command{
		Use:   "pull --from URL",
		Short: "Copy the state of another backend into the configured one",
		Long: `Copy the whole state of the backend at URL (local, local:PATH or
etcd://HOST:PORT,.../PREFIX/?...) into the configured backend. Both states
are locked meanwhile. A target holding another state (another lineage) or a
newer one (a higher serial) is refused unless --force.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			dst, err := a.stateBackend()
			if err != nil {
				return err
			}
			src, err := backend.Parse(from, "--from")
			if err != nil {
				return err
			}
			return a.move(backend.WithPassword(src, a.etcdPassword), dst.Config, force)
		},
	}
	pull.Flags().StringVar(&from, "from", "", "the backend `URL` to copy the state from")
	pull.Flags().BoolVar(&force, "force", false, "overwrite a target of another lineage or a newer serial")
	_ = pull.MarkFlagRequired("from")
	return []*cobra.Command{push, pull}
}

// move copies the state of src over dst's (backend.Copy).
func (a *app) move(src, dst *phases.BackendConfig, force bool) error {
	s, err := a.backend(src)
	if err != nil {
		return err
	}
	d, err := a.backend(dst)
	if err != nil {
		return err
	}
	snap, err := backend.Copy(context.Background(), s, d, stateOptions(true), force)
	if err != nil {
		return err
	}
	a.view().Note("Copied the state (lineage %s, serial %d, %d steps) from %s to %s.", snap.Lineage, snap.Serial, len(snap.Steps), s, d)
	return nil
}
