package main

import (
	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/state"
)

func (a *app) stateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Inspect the state or break a dead holder's lock",
	}
	var asJSON bool
	show := &cobra.Command{
		Use:   "show",
		Short: "Print the state snapshot as JSON, and who holds the lock",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) (err error) {
			dir, err := a.stateDir()
			if err != nil {
				return err
			}
			st, err := a.openState(false)
			if err != nil {
				return err
			}
			defer a.closeState(st, &err)
			lock, err := state.ReadLock(dir)
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
		Long: `Remove the state lock with the given ID (state show prints it). It is
refused while the process holding the lock is alive: stop that process
instead, as two writers would corrupt the state.`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			dir, err := a.stateDir()
			if err != nil {
				return err
			}
			if err := state.Unlock(dir, args[0]); err != nil {
				return err
			}
			a.view().Unlocked(args[0])
			return nil
		},
	}
	cmd.AddCommand(show, unlock)
	return cmd
}
