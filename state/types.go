package state

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/homelab-migrate/migrate/phases"
)

// CurrentVersion is the format version this build writes. Version 2 added
// the snapshot's checksum; version 3 renamed two keys of a step's record
// to the code's words ("inverse" to "revert", "record" to "facts");
// version 4 added a record's provider (a version 3 record is one without
// it). Versions 1 and 2 are read (through the frozen types of v2.go) and
// written as 4 by the next writer; a newer version is refused.
const CurrentVersion = 4

// Status of a step (or check) record.
type Status string

const (
	Pending      Status = "pending"
	Running      Status = "running"
	Done         Status = "done"
	Failed       Status = "failed"
	Reverting    Status = "reverting"
	Reverted     Status = "reverted"
	RevertFailed Status = "revert_failed"
)

// StepRecord is everything the state knows of one step or check.
type StepRecord struct {
	Addr  phases.Address `json:"address"`
	Phase string         `json:"phase"`
	Check bool           `json:"check,omitempty"`
	// Provider is the provider configuration (TYPE.NAME) that last ran
	// or reverted the step: what undoes it once the runbook no longer
	// has the step. Empty in records of format 3 and older.
	Provider string `json:"provider,omitempty"`
	// Status is the last thing that happened to the step.
	Status Status `json:"status"`
	// InputHash is a hash of the evaluated attributes the step last ran
	// with; a change means the plan says "update".
	InputHash string `json:"input_hash,omitempty"`
	// Outputs is the step's output object in cty's JSON encoding with its
	// type ({"value":...,"type":...}); sensitive values are redacted.
	Outputs json.RawMessage `json:"outputs,omitempty"`
	// Private is opaque provider data.
	Private json.RawMessage `json:"private,omitempty"`
	// Revert says how to revert the step (rollback hands it to its
	// provider); nil when it cannot be reverted. (Formats 1 and 2 kept
	// it under "inverse".)
	Revert *phases.RevertData `json:"revert,omitempty"`
	// Identity names the thing the step made or acted on, as its provider
	// said (an instance's UUID, a cluster's UID): made again under the
	// same name, it has another.
	Identity string `json:"identity,omitempty"`
	// Upstream holds, by address, the identities of the steps this one
	// depends on (directly or through others) when it ran: the world its
	// record describes. One of them replaced since, the record is no
	// proof about the new one.
	Upstream map[string]string `json:"upstream,omitempty"`
	// Facts are what the step established, such as who approved an
	// approval step. (Formats 1 and 2 kept them under "record".)
	Facts      map[string]string `json:"facts,omitempty"`
	Attempts   int               `json:"attempts"`
	StartedAt  *time.Time        `json:"started_at,omitempty"`
	FinishedAt *time.Time        `json:"finished_at,omitempty"`
	LastError  string            `json:"last_error,omitempty"`
	// Holder is who started the step, while it is running or reverting:
	// the state's lock holder when the record was written. Another
	// holder that finds the step still running asks whether that one may
	// still run it (HolderChecker).
	Holder *Holder `json:"holder,omitempty"`
	// MovedFrom, only in the journal entry that moves a record (Move),
	// is the address the record had: applying the entry removes that
	// one. A snapshot's records never hold it.
	MovedFrom string `json:"moved_from,omitempty"`
}

// Apply puts rec into s under its address; a record that moves (MovedFrom)
// leaves its old address. Every backend folds entries with it.
func (s *Snapshot) Apply(rec *StepRecord) {
	if from := rec.MovedFrom; from != "" {
		delete(s.Steps, from)
		rec.MovedFrom = ""
		// The steps that depend on it keep its world under its new
		// address, so that their check of what replaced it still holds.
		for _, other := range s.Steps {
			if w, ok := other.Upstream[from]; ok {
				delete(other.Upstream, from)
				other.Upstream[rec.Addr.String()] = w
			}
		}
	}
	s.Steps[rec.Addr.String()] = rec
}

// Move carries the record at from to the address to, in phase (the
// record's own when empty), as one checkpoint: the step was renamed (a
// runbook's moved block). It refuses when to has a record already, and
// does nothing when from has none.
func Move(m Manager, from, to phases.Address, phase string) error {
	rec, ok := m.Step(from)
	if !ok {
		return nil
	}
	if _, ok := m.Step(to); ok {
		return fmt.Errorf("moving %s to %s: %s has a record already", from, to, to)
	}
	rec.Addr, rec.MovedFrom = to, from.String()
	if phase != "" {
		rec.Phase = phase
	}
	return m.Checkpoint(rec)
}

// Holder names the lock holder that started a step: its lock's ID, the
// process, and for a state in etcd the lease the lock was bound to (its
// holder lives while the lease does).
type Holder struct {
	LockID string `json:"lock_id"`
	PID    int    `json:"pid,omitempty"`
	Host   string `json:"host,omitempty"`
	User   string `json:"user,omitempty"`
	Lease  int64  `json:"lease,omitempty"`
}

// HolderOf is the Holder of a lock held under lease (0: no lease).
func HolderOf(l *LockInfo, lease int64) *Holder {
	return &Holder{LockID: l.ID, PID: l.PID, Host: l.Host, User: l.User, Lease: lease}
}

// Stamped returns rec as a lock holder h writes it: with h as its Holder
// while it is running or reverting, without one otherwise. rec itself is
// not changed; nil stays nil (for PrepareRecord to refuse).
func (rec *StepRecord) Stamped(h *Holder) *StepRecord {
	if rec == nil {
		return nil
	}
	c := *rec
	c.Holder = nil
	if h != nil && (rec.Status == Running || rec.Status == Reverting) {
		hc := *h
		c.Holder = &hc
	}
	return &c
}

// HolderChecker is a Manager that can tell whether the holder that
// started a step may still be running it: a holder on another machine
// with a lease still alive. The local files need none: their lock is a
// flock, and holding it proves the last holder gone.
type HolderChecker interface {
	// RunningElsewhere returns nil when rec (recorded running or
	// reverting) was started by this holder or by one provably gone;
	// otherwise an error that says who may still run it and what to do.
	RunningElsewhere(ctx context.Context, rec *StepRecord) error
}

// RunningElsewhere asks m, when it is a HolderChecker, whether rec may be
// running under another holder; nil when m cannot tell.
func RunningElsewhere(ctx context.Context, m Manager, rec *StepRecord) error {
	if hc, ok := m.(HolderChecker); ok {
		return hc.RunningElsewhere(ctx, rec)
	}
	return nil
}

// Snapshot is the whole state at one serial.
type Snapshot struct {
	Version        int    `json:"version"`
	Serial         uint64 `json:"serial"`
	Lineage        string `json:"lineage"`
	MigrateVersion string `json:"migrate_version"`
	// Steps is keyed by address string.
	Steps map[string]*StepRecord `json:"steps"`
}

// LockInfo says who holds the state lock.
type LockInfo struct {
	ID      string    `json:"id"`
	PID     int       `json:"pid"`
	Host    string    `json:"host"`
	User    string    `json:"user"`
	Command string    `json:"command"`
	Created time.Time `json:"created"`
}

// Manager is the state as the engine sees it. Implementations are safe for
// concurrent use.
type Manager interface {
	// Snapshot returns a deep copy of the current state, journal included.
	Snapshot() *Snapshot
	// Step returns a copy of one record.
	Step(phases.Address) (*StepRecord, bool)
	// Checkpoint durably records rec (replacing the previous record of its
	// address) before it returns. Cost is independent of the state's size.
	Checkpoint(rec *StepRecord) error
	// CheckpointUnsynced writes rec like Checkpoint but returns before it reaches
	// stable storage: it survives the process dying, and a power loss
	// once a later Checkpoint returned. For transitions that recovery
	// does not depend on (a step starting: without the record, resume
	// applies it again instead of observing it first).
	CheckpointUnsynced(rec *StepRecord) error
	// Persist folds the journal into a new snapshot, atomically.
	Persist() error
	// Close persists (when writable) and releases the lock.
	Close() error
}
