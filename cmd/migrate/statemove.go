package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
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
			dst, err := parseBackend(to, "--to")
			if err != nil {
				return err
			}
			return a.move(src, a.withPassword(dst), force)
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
			src, err := parseBackend(from, "--from")
			if err != nil {
				return err
			}
			return a.move(a.withPassword(src), dst, force)
		},
	}
	pull.Flags().StringVar(&from, "from", "", "the backend `URL` to copy the state from")
	pull.Flags().BoolVar(&force, "force", false, "overwrite a target of another lineage or a newer serial")
	_ = pull.MarkFlagRequired("from")
	return []*cobra.Command{push, pull}
}

// move copies the state of src over dst's, both locked so that no run
// changes either meanwhile.
func (a *app) move(src, dst *phases.BackendConfig, force bool) (err error) {
	ctx := context.Background()
	srcDir, err := a.localDir(src)
	if err != nil {
		return err
	}
	dstDir, err := a.localDir(dst)
	if err != nil {
		return err
	}
	from, to := describe(src, srcDir), describe(dst, dstDir)
	if from == to {
		return fmt.Errorf("the state is already in %s: nothing to copy", to)
	}
	// The refusals first, on both states read without their locks, so
	// that a refused copy creates no state and changes neither; Import
	// checks again under the locks.
	if err := a.checkMove(ctx, src, dst, from, to, force); err != nil {
		return err
	}
	s, err := a.openBackend(ctx, src, true)
	if err != nil {
		return err
	}
	defer a.closeState(s, &err)
	d, err := a.openBackend(ctx, dst, true)
	if err != nil {
		return err
	}
	defer a.closeState(d, &err)
	snap := s.Snapshot()
	if err := d.Import(snap, force); err != nil {
		return fmt.Errorf("copying the state to %s: %w", to, err)
	}
	a.view().Note("Copied the state (lineage %s, serial %d, %d steps) from %s to %s.", snap.Lineage, snap.Serial, len(snap.Steps), from, to)
	return nil
}

// checkMove refuses a copy from a backend without a state (there is
// nothing to copy) or over a target Import would refuse.
func (a *app) checkMove(ctx context.Context, src, dst *phases.BackendConfig, from, to string, force bool) error {
	read := func(b *phases.BackendConfig) (*state.Snapshot, error) {
		st, err := a.openBackend(ctx, b, false)
		if err != nil {
			return nil, err
		}
		defer st.Close()
		return st.Snapshot(), nil
	}
	snap, err := read(src)
	if err != nil {
		return err
	}
	if snap.Lineage == "" {
		return fmt.Errorf("there is no state in %s to copy (check --backend, --state or the runbook's backend block); nothing was changed", from)
	}
	cur, err := read(dst)
	if err != nil {
		return err
	}
	if err := state.CheckImport(cur, snap, force); err != nil {
		return fmt.Errorf("copying the state to %s: %w; nothing was changed", to, err)
	}
	return nil
}
