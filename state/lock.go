package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"time"
)

// The state lock is an flock(2) on DIR/lock, which holds the holder's
// LockInfo as JSON. The kernel drops the flock when its process dies, even
// by kill -9, so a dead holder never blocks the next writer; the file it
// leaves behind is only information. A holder removes the file when it
// releases the lock; acquirers check after flock that the file they locked
// is still the one at the path, so a removal racing with an acquisition
// never lets two writers in.

// NewLockInfo describes the current process as a lock holder running
// command, with a fresh random ID.
func NewLockInfo(command string) *LockInfo {
	info := &LockInfo{Command: command}
	FillLockInfo(info)
	return info
}

// FillLockInfo fills the empty fields of info (ID, PID, host, user, time)
// for the current process.
func FillLockInfo(info *LockInfo) {
	if info.ID == "" {
		info.ID = RandomHex(8)
	}
	if info.PID == 0 {
		info.PID = os.Getpid()
	}
	if info.Host == "" {
		info.Host, _ = os.Hostname()
	}
	if info.User == "" {
		if u, err := user.Current(); err == nil {
			info.User = u.Username
		} else {
			info.User = os.Getenv("USER")
		}
	}
	if info.Created.IsZero() {
		info.Created = time.Now().UTC()
	}
}

// acquireLock takes the lock on dir for info, or fails at once with a
// *LockedError naming the holder.
func acquireLock(dir string, info *LockInfo) (*os.File, error) {
	path := filepath.Join(dir, lockFile)
	for attempt := 0; ; attempt++ {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("state lock: %w", err)
		}
		err = flock(f, true)
		if err == errWouldBlock {
			f.Close()
			// ReadLock and Unlock hold the lock for an instant to see
			// whether anyone else does; only a holder that stays counts.
			if attempt < 3 {
				time.Sleep(2 * time.Millisecond)
				continue
			}
			le := &LockedError{Path: path}
			h, err := readLockFile(path)
			if err != nil {
				le.ReadErr = err
			} else {
				le.Holder = *h
			}
			// A holder killed a moment ago may still have the lock shared
			// with a child it forked that has not yet exec'd or died;
			// the kernel releases it within moments. Wait for that
			// rather than failing, but never for a live holder.
			if err == nil && holderGone(h) && attempt < 3+deadHolderRetries {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return nil, le
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("state lock: %w", err)
		}
		if ok, err := isCurrent(f, path); !ok {
			// Released (and removed) between our open and our flock:
			// we hold a lock on a file nobody else will see. Again.
			f.Close()
			if err != nil && !errors.Is(err, os.ErrNotExist) || attempt > 100 {
				return nil, fmt.Errorf("state lock %s: %v", path, err)
			}
			continue
		}
		b, err := json.Marshal(info)
		if err == nil {
			b = append(b, '\n')
			if err = f.Truncate(0); err == nil {
				_, err = f.WriteAt(b, 0)
			}
		}
		if err != nil {
			releaseLock(f)
			return nil, fmt.Errorf("state lock: writing %s: %w", path, err)
		}
		return f, nil
	}
}

// deadHolderRetries × 10 ms is how long a lock whose recorded holder is
// dead may stay held (by that holder's half-started children) before it
// counts as held.
const deadHolderRetries = 300

// holderGone reports whether the lock's recorded holder is a process of
// this host that no longer exists.
func holderGone(h *LockInfo) bool {
	host, _ := os.Hostname()
	if h.Host != host || h.PID <= 0 {
		return false
	}
	return !processAlive(h.PID)
}

// releaseLock removes the lock file (while still holding the lock) and
// releases it.
func releaseLock(f *os.File) error {
	var err error
	if ok, _ := isCurrent(f, f.Name()); ok {
		err = os.Remove(f.Name())
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// isCurrent reports whether f is the file now at path.
func isCurrent(f *os.File, path string) (bool, error) {
	a, err := f.Stat()
	if err != nil {
		return false, err
	}
	b, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return os.SameFile(a, b), nil
}

func readLockFile(path string) (*LockInfo, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseLockInfo(b)
}

// ParseLockInfo decodes a lock's JSON.
func ParseLockInfo(b []byte) (*LockInfo, error) {
	var info LockInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, fmt.Errorf("lock info: %w", jsonErr(b, err))
	}
	return &info, nil
}

// ReadLock returns the holder of the lock on the state in dir, or nil, nil
// when nobody holds it (a lock file left by a process that died is not a
// lock). It never blocks a writer for more than an instant.
func ReadLock(dir string) (*LockInfo, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	switch err := flock(f, false); {
	case err == nil:
		funlock(f)
		return nil, nil
	case err != errWouldBlock:
		return nil, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	info, err := ParseLockInfo(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return info, nil
}

// Unlock breaks the lock on the state in dir if its ID is id: it removes
// the lock file a holder left behind. It refuses when id does not match, and
// when a live process still holds the lock (stop that process instead: two
// writers would corrupt the state).
func Unlock(dir, id string) error {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("the state in %s is not locked", dir)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	info, err := ParseLockInfo(b)
	if err != nil && len(b) > 0 {
		return fmt.Errorf("%s: %w", path, err)
	}
	if info == nil || info.ID != id {
		held := "no lock ID"
		if info != nil {
			held = "lock ID " + info.ID
		}
		return fmt.Errorf("lock ID %q does not match the lock on the state in %s (%s): nothing unlocked", id, dir, held)
	}
	switch err := flock(f, true); {
	case err == errWouldBlock:
		return fmt.Errorf("lock %s is held by a running process: pid %d (%s@%s, %q); stop it instead of unlocking",
			id, info.PID, info.User, info.Host, info.Command)
	case err != nil:
		return err
	}
	if ok, _ := isCurrent(f, path); !ok {
		return nil // released meanwhile
	}
	return os.Remove(path)
}
