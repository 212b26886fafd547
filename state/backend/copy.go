package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/homelab-migrate/migrate/state"
)

// Copy copies the whole state of src over dst's (state push and pull),
// both locked (opts.Lock) so that no run changes either meanwhile, and
// returns the snapshot copied. A source without a state is refused, and,
// unless force, a target of another lineage or a newer serial; a refused
// copy creates no state and changes neither.
func Copy(ctx context.Context, src, dst Backend, opts state.Options, force bool) (snap *state.Snapshot, err error) {
	from, to := src.String(), dst.String()
	if from == to {
		return nil, fmt.Errorf("the state is already in %s: nothing to copy", to)
	}
	// The refusals first, on both states read without their locks; Import
	// checks again under the locks.
	if err := checkCopy(ctx, src, dst, opts, force); err != nil {
		return nil, err
	}
	s, err := src.Open(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer closeInto(s, &err)
	d, err := dst.Open(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer closeInto(d, &err)
	snap = s.Snapshot()
	if err := d.Import(snap, force); err != nil {
		return nil, fmt.Errorf("copying the state to %s: %w", to, err)
	}
	return snap, nil
}

// closeInto closes st, a failure to save it joining *err.
func closeInto(st Store, err *error) {
	if cerr := st.Close(); cerr != nil {
		*err = errors.Join(*err, fmt.Errorf("saving the state: %w", cerr))
	}
}

// checkCopy refuses a copy from a backend without a state (there is
// nothing to copy) or over a target Import would refuse.
func checkCopy(ctx context.Context, src, dst Backend, opts state.Options, force bool) error {
	opts.Lock = nil
	read := func(b Backend) (*state.Snapshot, error) {
		st, err := b.Open(ctx, opts)
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
		return fmt.Errorf("there is no state in %s to copy (check --backend, --state or the runbook's backend block); nothing was changed", src)
	}
	cur, err := read(dst)
	if err != nil {
		return err
	}
	if err := state.CheckImport(cur, snap, force); err != nil {
		return fmt.Errorf("copying the state to %s: %w; nothing was changed", dst, err)
	}
	return nil
}
