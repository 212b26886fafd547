package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// What another backend (state/etcdstate) shares with Local: the same
// records, journal entries, snapshot encoding and lock information, so
// every backend checks integrity and folds the same way.

// PrepareRecord validates rec and returns the copy a backend stores (its
// error cut, as JSON reads it back) and its compact JSON encoding.
func PrepareRecord(rec *StepRecord) (*StepRecord, []byte, error) {
	if rec == nil {
		return nil, nil, errors.New("checkpoint: nil record")
	}
	if err := validateRecord(rec); err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	if len(rec.LastError) > maxRecordErrorBytes {
		// The engine cuts errors with a pointer to its log; this is for
		// any other caller.
		c := *rec
		c.LastError = CutError(rec.LastError, "")
		rec = &c
	}
	b, err := marshalRecord(rec)
	if err != nil {
		return nil, nil, err
	}
	c := new(StepRecord)
	if err := json.Unmarshal(b, c); err != nil {
		return nil, nil, fmt.Errorf("checkpoint %s: %w", rec.Addr, err)
	}
	return c, b, nil
}

// EncodeEntry is the journal entry of seq (a journal line without its
// newline, CRC included); step is a record's JSON from PrepareRecord.
func EncodeEntry(seq uint64, lineage string, now time.Time, step []byte) []byte {
	b := appendJournalLine(nil, seq, lineage, now, step)
	return b[:len(b)-1]
}

// Entry is a decoded journal entry.
type Entry struct {
	Seq     uint64
	Lineage string
	Step    *StepRecord
}

// DecodeEntry decodes and verifies (CRC, lineage, record) one entry
// written by EncodeEntry.
func DecodeEntry(b []byte) (Entry, error) {
	e, err := parseJournalLine(b)
	if err != nil {
		return Entry{}, err
	}
	if e.CRC == "" {
		return Entry{}, errors.New("no checksum")
	}
	return Entry{Seq: e.Seq, Lineage: e.Lineage, Step: e.Step}, nil
}

// EncodeSnapshot is s as Local writes state.json (CurrentVersion, with its
// checksum); DecodeSnapshot reads it back, verifying the checksum.
func EncodeSnapshot(s *Snapshot) ([]byte, error) { return marshalSnapshot(s) }

// DecodeSnapshot decodes a snapshot of any known version; see Read.
func DecodeSnapshot(b []byte) (*Snapshot, error) {
	s, _, err := readSnapshot(b)
	return s, err
}

// NewLineage returns a random identifier for a new state.
func NewLineage() string { return newLineage() }

// RandomHex returns n random bytes in hex.
func RandomHex(n int) string { return randomHex(n) }

// FillLockInfo fills the empty fields of info (ID, PID, host, user, time)
// for the current process.
func FillLockInfo(info *LockInfo) { fillLockInfo(info) }

// ParseLockInfo decodes a lock's JSON.
func ParseLockInfo(b []byte) (*LockInfo, error) { return parseLockInfo(b) }

// Clone returns a deep copy of s.
func (s *Snapshot) Clone() *Snapshot { return cloneSnapshot(s) }

// Clone returns a deep copy of r.
func (r *StepRecord) Clone() *StepRecord { return cloneRecord(r) }

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
	b, err := marshalSnapshot(snap)
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
