package state

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/homelab-migrate/migrate/phases"
)

// Options configure Open.
type Options struct {
	// Lock makes the state writable and is recorded as the holder of its
	// lock; empty fields are filled in (ID, PID, host, user, time). Nil
	// opens the state read-only (plan, status, show): nothing is ever
	// written, and a missing directory is not created.
	Lock *LockInfo
	// MigrateVersion is written into snapshots.
	MigrateVersion string
	// Expect, with Lock, is asked about the state read under the lock
	// before anything is written (no journal fold, no new snapshot): an
	// error releases the lock and is returned as is. A command that
	// planned on the state read without the lock says here that it must
	// still be the state it planned against, so that its refusal leaves
	// the files as they were.
	Expect func(*Snapshot) error
}

// Local is the state in a local directory (RUNBOOK/.migrate by default):
//
//	state.json         the snapshot
//	state.json.backup  the snapshot before the last Persist
//	journal.jsonl      checkpoints since the snapshot
//	lock               the lock, with its holder's LockInfo
//
// A Local is safe for concurrent use. Concurrent checkpoints share writes
// and syncs (group commit): whoever finds no write in progress writes every
// pending line in one write and syncs once, for all of them.
type Local struct {
	dir      string
	opts     Options
	lockInfo *LockInfo
	lock     *os.File // nil when read-only
	journal  *os.File // nil when read-only

	mu   sync.Mutex
	cond sync.Cond // on mu; signalled when a batch is done or Persist ends
	// snap holds durable records only: a checkpoint is applied to it once
	// its journal line is synced.
	snap *Snapshot
	// dirty: state.json is behind snap (or missing, or in an older version).
	dirty bool
	// journalBytes counts bytes in journal.jsonl since it was last
	// truncated, including any torn tail found by Open.
	journalBytes int64
	lastSeq      uint64 // seq of the last line handed to the journal
	open         *batch // lines waiting for the next write
	flushing     bool   // a write is in progress
	persisting   int    // Persist/Close waiting for the journal to be idle
	err          error  // a journal write failed; cleared by Persist
	closed       bool
	syncs        uint64 // journal writes done (tests, benchmarks)
	datasyncs    uint64 // of which synced
}

// batch is a group of journal lines written and synced together.
type batch struct {
	// sync: some record of the batch must reach stable storage.
	sync bool
	buf  []byte
	recs []*StepRecord
	last uint64 // seq of the last line
	done bool
	err  error
}

var _ Manager = (*Local)(nil)

// Open opens the state in dir. With opts.Lock it takes the lock (failing at
// once with a *LockedError if another process holds it), creates dir and a
// new state if there is none, and folds the journal into the snapshot. A
// file that cannot be read is an *UnusableError and is left untouched.
func Open(dir string, opts Options) (*Local, error) {
	l := &Local{dir: dir, opts: opts}
	l.cond.L = &l.mu
	if opts.Lock == nil {
		if err := l.loadReadOnly(); err != nil {
			return nil, err
		}
		return l, nil
	}
	info := *opts.Lock
	FillLockInfo(&info)
	l.lockInfo = &info
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	lf, err := acquireLock(dir, &info)
	if err != nil {
		return nil, err
	}
	l.lock = lf
	if err := l.loadWritable(); err != nil {
		if l.journal != nil {
			l.journal.Close()
		}
		releaseLock(lf)
		return nil, err
	}
	return l, nil
}

func (l *Local) loadWritable() error {
	removeTemps(l.dir)
	snap, entries, jdata, legacy, err := l.read()
	if err != nil {
		return err
	}
	if snap == nil {
		snap = &Snapshot{Version: CurrentVersion, Lineage: NewLineage(), Steps: map[string]*StepRecord{}}
		l.dirty = true
	}
	applied, err := replay(snap, entries, legacy)
	if err != nil {
		return l.journalUnusable(err, snap.Serial)
	}
	if l.opts.Expect != nil {
		if err := l.opts.Expect(snap); err != nil {
			return err
		}
	}
	l.snap, l.lastSeq, l.journalBytes = snap, snap.Serial, int64(len(jdata))
	l.dirty = l.dirty || applied > 0
	l.journal, err = os.OpenFile(filepath.Join(l.dir, journalFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("state journal: %w", err)
	}
	// Fold the journal (and drop a torn tail) now, so the run starts
	// from a clean snapshot.
	return l.persistLocked()
}

func (l *Local) loadReadOnly() error {
	for attempt := 0; ; attempt++ {
		snap, entries, jdata, legacy, err := l.read()
		if err == nil {
			if snap == nil {
				snap = &Snapshot{Version: CurrentVersion, Steps: map[string]*StepRecord{}}
			}
			if _, err = replay(snap, entries, legacy); err != nil {
				err = l.journalUnusable(err, snap.Serial)
			}
		}
		// A writer may be folding the journal right now: the journal and
		// snapshot read can straddle its truncation. Look again if the
		// journal has changed since.
		var ue *UnusableError
		if errors.As(err, &ue) && ue.Path == filepath.Join(l.dir, journalFile) && attempt < 3 && journalChanged(ue.Path, jdata) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		l.snap = snap
		return err
	}
}

// read loads the journal and then the snapshot (in that order, so a
// concurrent Persist can only make the snapshot newer than the journal,
// never miss entries). snap is nil when there is no state.json; legacy
// says it is in version 1, whose journal lines have no checksum.
func (l *Local) read() (snap *Snapshot, entries []journalEntry, jdata []byte, legacy bool, err error) {
	jpath := filepath.Join(l.dir, journalFile)
	version := CurrentVersion // of the journal's lines: the snapshot's
	jdata, err = os.ReadFile(jpath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil, false, fmt.Errorf("state journal: %w", err)
	}
	spath := filepath.Join(l.dir, snapshotFile)
	sdata, err := os.ReadFile(spath)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, nil, nil, false, fmt.Errorf("state: %w", err)
	default:
		snap, version, err = readSnapshot(sdata)
		if err != nil {
			return nil, nil, nil, false, l.snapshotUnusable(err)
		}
		if version < CurrentVersion {
			l.dirty = true // written in the current version at the next Persist
		}
		legacy = version == 1
	}
	entries, _, err = parseJournal(jdata, version)
	if err != nil {
		serial := uint64(0)
		if snap != nil {
			serial = snap.Serial
		}
		return nil, nil, jdata, false, l.journalUnusable(err, serial)
	}
	if snap == nil && len(entries) > 0 {
		return nil, nil, jdata, false, &UnusableError{
			Path: jpath,
			Err:  fmt.Errorf("%d journal entries but no %s", len(entries), snapshotFile),
			Hint: fmt.Sprintf("it was left untouched. Restore the snapshot (cp %s %s) if you moved it away, or move the journal aside to start from an empty state",
				filepath.Join(l.dir, backupFile), spath),
		}
	}
	return snap, entries, jdata, legacy, nil
}

// journalChanged says whether the journal at path no longer holds data.
func journalChanged(path string, data []byte) bool {
	now, err := os.ReadFile(path)
	return err != nil || !bytes.Equal(now, data)
}

func (l *Local) snapshotUnusable(err error) error {
	path := filepath.Join(l.dir, snapshotFile)
	if errors.Is(err, ErrNoState) {
		err = errors.New("the file is empty (truncated?)")
	}
	var nv *NewerVersionError
	if errors.As(err, &nv) {
		hint := "upgrade migrate"
		if nv.MigrateVersion != "" {
			hint += " to " + nv.MigrateVersion + " or later"
		}
		if l.opts.MigrateVersion != "" {
			hint += " (this is migrate " + l.opts.MigrateVersion + ")"
		}
		return &UnusableError{Path: path, Err: err, Hint: hint + fmt.Sprintf("; the file was left untouched "+
			"(if no newer migrate wrote it, it is damaged: restore the previous snapshot, cp %s %s)",
			filepath.Join(l.dir, backupFile), path)}
	}
	return &UnusableError{Path: path, Err: err, Hint: fmt.Sprintf(
		"it was left untouched. To recover, restore the previous snapshot if it is intact "+
			"(cp %s %s; the checkpoints in the journal since then are lost), "+
			"or move %s aside to start from an empty state",
		filepath.Join(l.dir, backupFile), path, path)}
}

func (l *Local) journalUnusable(err error, serial uint64) error {
	path := filepath.Join(l.dir, journalFile)
	return &UnusableError{Path: path, Err: err, Hint: fmt.Sprintf(
		"it was left untouched. To recover, repair or delete the bad line, or move %s aside "+
			"to go back to the snapshot (serial %d) and lose the checkpoints made since; "+
			"steps that ran meanwhile will be observed again by the next run",
		path, serial)}
}

// Lineage is the state's random identifier, set when it was created; ""
// for a read-only Local of a state that does not exist yet.
func (l *Local) Lineage() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snap.Lineage
}

// LockInfo returns the lock this Local holds, nil when read-only.
func (l *Local) LockInfo() *LockInfo {
	if l.lockInfo == nil {
		return nil
	}
	c := *l.lockInfo
	return &c
}

// Dir is the state directory.
func (l *Local) Dir() string { return l.dir }

// Snapshot returns a deep copy of the state, every checkpoint included.
func (l *Local) Snapshot() *Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snap.Clone()
}

// Step returns a copy of the record of addr.
func (l *Local) Step(addr phases.Address) (*StepRecord, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec, ok := l.snap.Steps[addr.String()]
	if !ok {
		return nil, false
	}
	return rec.Clone(), true
}

// Checkpoint appends a copy of rec to the journal and returns once it is on
// stable storage. The cost is one small write and one sync, shared with
// concurrent callers, whatever the number of records.
func (l *Local) Checkpoint(rec *StepRecord) error { return l.append(rec, true) }

// Record appends a copy of rec to the journal and returns once it is
// written, without waiting for stable storage: it survives the death of
// this process (kill -9 included) at once, and a power loss only from the
// next Checkpoint on, whose sync covers every line before it.
func (l *Local) CheckpointUnsynced(rec *StepRecord) error { return l.append(rec, false) }

func (l *Local) append(rec *StepRecord, sync bool) error {
	if l.journal == nil {
		return ErrReadOnly
	}
	// The record as JSON reads it back (invalid UTF-8 replaced, as the
	// journal has it), so that a snapshot's checksum, taken of what is
	// written, matches what is read; it is also a deep copy. A step
	// started names this holder.
	c, step, err := PrepareRecord(rec.Stamped(HolderOf(l.lockInfo, 0)))
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.persisting > 0 && !l.closed {
		l.cond.Wait()
	}
	if l.closed {
		return ErrClosed
	}
	if l.err != nil {
		return fmt.Errorf("checkpoint %s: the state journal failed earlier: %w", rec.Addr, l.err)
	}
	b := l.open
	if b == nil {
		b = &batch{}
		l.open = b
	}
	l.lastSeq++
	b.last = l.lastSeq
	b.sync = b.sync || sync
	b.buf = appendJournalLine(b.buf, l.lastSeq, l.snap.Lineage, time.Now(), step)
	b.recs = append(b.recs, c)
	for !b.done {
		if !l.flushing && l.open == b {
			l.flush(b)
		} else {
			l.cond.Wait()
		}
	}
	return b.err
}

// flush writes and syncs b, with l.mu held on entry and exit (not during
// the I/O, so more lines can gather in the next batch meanwhile).
func (l *Local) flush(b *batch) {
	l.flushing, l.open = true, nil
	l.mu.Unlock()
	_, err := l.journal.Write(b.buf)
	if err == nil && b.sync {
		err = datasync(l.journal)
		l.datasyncs++ // under no lock, but only one flush runs at a time
	}
	l.mu.Lock()
	l.flushing = false
	l.syncs++
	l.journalBytes += int64(len(b.buf))
	if err == nil {
		for _, r := range b.recs {
			l.snap.Apply(r)
		}
		l.snap.Serial = b.last
		l.dirty = true
	} else {
		// The journal may end with part of this batch: nothing more may
		// be appended after it until Persist truncates it.
		err = fmt.Errorf("writing %s: %w", l.journal.Name(), err)
		l.err = err
		l.lastSeq = l.snap.Serial
		if l.open != nil {
			l.open.done, l.open.err = true, err
			l.open = nil
		}
	}
	b.done, b.err = true, err
	l.cond.Broadcast()
}

// waitIdle waits, with l.mu held, until no journal write is pending, and
// holds new checkpoints back meanwhile.
func (l *Local) waitIdle() {
	l.persisting++
	for l.flushing || l.open != nil {
		l.cond.Wait()
	}
	l.persisting--
}

// Persist writes the state as a new snapshot, atomically, keeps the
// previous one as state.json.backup, and empties the journal. It does
// nothing when no checkpoint was made since the last snapshot.
func (l *Local) Persist() error {
	if l.journal == nil {
		return ErrReadOnly
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	l.waitIdle()
	defer l.cond.Broadcast()
	return l.persistLocked()
}

func (l *Local) persistLocked() error {
	if l.dirty {
		if l.opts.MigrateVersion != "" {
			l.snap.MigrateVersion = l.opts.MigrateVersion
		}
		b, err := EncodeSnapshot(l.snap)
		if err != nil {
			return fmt.Errorf("state: %w", err)
		}
		if err := backupSnapshot(l.dir); err != nil {
			return fmt.Errorf("state backup: %w", err)
		}
		if err := writeAtomic(l.dir, snapshotFile, b); err != nil {
			return fmt.Errorf("state: %w", err)
		}
		l.dirty = false
	}
	if l.journalBytes > 0 {
		// Every entry is in the snapshot now. Should this truncation be
		// lost in a crash, replay skips them by their seq.
		if err := l.journal.Truncate(0); err != nil {
			return fmt.Errorf("state journal: %w", err)
		}
		l.journalBytes = 0
		l.err = nil
	}
	return nil
}

// Close persists the state (when writable) and releases the lock. The lock
// is released even when persisting fails; the journal keeps every
// checkpoint then.
func (l *Local) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	if l.journal == nil {
		l.closed = true
		l.mu.Unlock()
		return nil
	}
	l.waitIdle()
	err := l.persistLocked()
	l.closed = true
	l.cond.Broadcast()
	l.mu.Unlock()
	return errors.Join(err, l.journal.Close(), releaseLock(l.lock))
}
