package state

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrNoState is returned by Read for an empty input: there is no state yet.
var ErrNoState = errors.New("no state")

// ErrUnusableState matches every *UnusableError through errors.Is.
var ErrUnusableState = errors.New("unusable state")

// ErrReadOnly is returned by Checkpoint and Persist on a Local opened
// without a lock.
var ErrReadOnly = errors.New("state opened read-only (without a lock): cannot write")

// ErrClosed is returned by a Local after Close.
var ErrClosed = errors.New("state is closed")

// UnusableError says a state file cannot be used as it is. The file is left
// exactly as it was found; Hint says how to recover.
type UnusableError struct {
	Path string
	Err  error
	Hint string
}

func (e *UnusableError) Error() string {
	what := "state file"
	if strings.HasPrefix(e.Path, "etcd ") {
		what = "state in" // a key of state/etcdstate
	}
	msg := fmt.Sprintf("%s %s is unusable: %v", what, e.Path, e.Err)
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

func (e *UnusableError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUnusableState) true.
func (e *UnusableError) Is(target error) bool { return target == ErrUnusableState }

// NewerVersionError says a state file was written in a format version this
// build does not know.
type NewerVersionError struct {
	Version        int
	MigrateVersion string // the migrate that wrote it, if recorded
}

func (e *NewerVersionError) Error() string {
	by := ""
	if e.MigrateVersion != "" {
		by = " by migrate " + e.MigrateVersion
	}
	return fmt.Sprintf("it was written in state format version %d%s, and this migrate reads versions up to %d", e.Version, by, CurrentVersion)
}

// LockedError says another process holds the state lock.
type LockedError struct {
	Holder LockInfo
	// Path is the lock file.
	Path string
	// ReadErr is set when the holder's lock info could not be read (it may
	// be writing it right now).
	ReadErr error
}

func (e *LockedError) Error() string {
	h := e.Holder
	if h.ID == "" {
		msg := "state is locked by another process"
		if e.ReadErr != nil {
			msg += fmt.Sprintf(" (its lock info in %s could not be read: %v)", e.Path, e.ReadErr)
		}
		return msg + "; try again in a moment"
	}
	since := ""
	if !h.Created.IsZero() {
		since = fmt.Sprintf(" since %s (%s ago)", h.Created.Local().Format(time.RFC3339),
			time.Since(h.Created).Round(time.Second))
	}
	return fmt.Sprintf("state is locked by pid %d (%s@%s) running %q%s, lock ID %s; "+
		"if that process is gone, run `migrate state unlock %s`",
		h.PID, h.User, h.Host, h.Command, since, h.ID, h.ID)
}
