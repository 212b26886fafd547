package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/runbooks"
	"github.com/homelab-migrate/migrate/state/backend"
)

func (a *app) stateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Inspect the state, break a dead holder's lock, move the state between backends",
	}
	var asJSON bool
	show := &cobra.Command{
		Use:   "show",
		Short: "Print the state snapshot as JSON, and who holds the lock",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) (err error) {
			ctx := context.Background()
			b, err := a.stateBackend()
			if err != nil {
				return err
			}
			st, err := b.Open(ctx, stateOptions(false))
			if err != nil {
				return err
			}
			defer a.closeState(st, &err)
			lock, err := b.ReadLock(ctx)
			if err != nil {
				a.view().Warn("cannot read the lock: %v", err)
			}
			return a.view().StateShow(st.Snapshot(), lock, asJSON)
		},
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print one JSON document with the state and the lock holder")
	unlock := &cobra.Command{
		Use:   "unlock ID",
		Short: "Remove the lock left by a process that is gone",
		Long: `Remove the state lock with the given ID (state show prints it). For
local files it is refused while the process holding the lock is alive:
stop that process instead. In etcd a dead holder's lock also goes by itself
once its lease expires (lock_ttl); unlocking it sooner is not refused, since
a holder on another machine cannot be seen: if it still runs, it stops at
its next checkpoint, saying it lost the lock.`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			b, err := a.stateBackend()
			if err != nil {
				return err
			}
			if err := b.Unlock(context.Background(), args[0]); err != nil {
				return err
			}
			a.view().Unlocked(args[0])
			return nil
		},
	}
	cmd.AddCommand(show, unlock)
	cmd.AddCommand(a.moveCommands()...)
	return cmd
}

// stateBackend is the backend of the state commands. They take no --var:
// the runbook (its variables from MIGRATE_VAR_NAME) is loaded for its
// backend block only when neither --backend nor MIGRATE_BACKEND chose one
// and a file of the runbook has one; otherwise the state is local.
func (a *app) stateBackend() (backend.Backend, error) {
	if a.backendURL != "" || os.Getenv(backend.EnvURL) != "" {
		return a.backendFor(nil)
	}
	dir, err := a.dir()
	if err != nil || !runbooks.DeclaresBackend(dir) {
		return a.backendFor(nil)
	}
	rb, err := a.load(varFlags{optional: true})
	if err != nil {
		return backend.Backend{}, err
	}
	return a.backendFor(rb)
}
