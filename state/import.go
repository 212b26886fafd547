package state

import (
	"errors"
	"fmt"
)

// CheckImport says whether a state (cur, empty when it has no step and
// serial 0) may be replaced by snap: refused, unless force, when their
// lineages differ and cur is not empty, or when cur is newer than snap.
func CheckImport(cur, snap *Snapshot, force bool) error {
	if snap == nil || snap.Lineage == "" {
		return errors.New("import: the state to import has no lineage")
	}
	if force {
		return nil
	}
	empty := cur == nil || (cur.Serial == 0 && len(cur.Steps) == 0)
	switch {
	case empty:
		return nil
	case cur.Lineage != snap.Lineage:
		return fmt.Errorf("import refused: the target holds another state (lineage %s, serial %d, %d steps), not a copy of this one (lineage %s); "+
			"force it only if that state is no longer wanted", cur.Lineage, cur.Serial, len(cur.Steps), snap.Lineage)
	case cur.Serial > snap.Serial:
		return fmt.Errorf("import refused: the target is newer (serial %d) than the state to import (serial %d) of the same lineage %s; "+
			"pull it first, or force it to lose the target's %d newer checkpoints", cur.Serial, snap.Serial, snap.Lineage, cur.Serial-snap.Serial)
	}
	return nil
}

// Import replaces the whole state with snap (push/pull between backends):
// the snapshot is written and the journal emptied. It refuses, unless
// force, a state of another lineage that is not empty, and one whose
// serial is newer than snap's (see CheckImport).
func (l *Local) Import(snap *Snapshot, force bool) error {
	if l.journal == nil {
		return ErrReadOnly
	}
	// The snapshot as a reader will see it: validated, checksummed.
	b, err := EncodeSnapshot(snap)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	s, _, err := readSnapshot(b)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	l.waitIdle()
	defer l.cond.Broadcast()
	if err := CheckImport(l.snap, s, force); err != nil {
		return err
	}
	old := l.snap
	l.snap, l.lastSeq, l.dirty = s, s.Serial, true
	if err := l.persistLocked(); err != nil {
		l.snap, l.lastSeq = old, old.Serial
		return err
	}
	return nil
}
