package views

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/homelab-migrate/migrate/state"
)

// StateShow prints the raw state: with asJSON, one document holding the
// snapshot and the lock holder; otherwise the snapshot as JSON on stdout
// and who holds the lock, in words, on stderr.
func (v *View) StateShow(snap *state.Snapshot, lock *state.LockInfo, asJSON bool) error {
	var doc any = snap
	if asJSON {
		doc = struct {
			State *state.Snapshot `json:"state"`
			Lock  *state.LockInfo `json:"lock"`
		}{snap, lock}
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if _, err := v.out.Write(append(b, '\n')); err != nil {
		return err
	}
	if !asJSON {
		if lock == nil {
			fmt.Fprintln(v.err, "The state is not locked.")
		} else {
			fmt.Fprintln(v.err, LockText(lock))
		}
	}
	return nil
}

// LockText says who holds a lock.
func LockText(l *state.LockInfo) string {
	return fmt.Sprintf("Locked by pid %d (%s@%s) running %q since %s, lock ID %s.",
		l.PID, l.User, l.Host, l.Command, l.Created.Local().Format(time.RFC3339), l.ID)
}

// Unlocked confirms a broken lock.
func (v *View) Unlocked(id string) {
	fmt.Fprintf(v.out, "The state lock %s was removed.\n", id)
}
