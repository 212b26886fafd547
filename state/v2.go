package state

import (
	"encoding/json"
	"time"

	"github.com/homelab-migrate/migrate/phases"
)

// Formats 1 and 2, frozen: these are copies of the types formats 1 and 2
// were written with, as they were when format 3 replaced them. Never edit
// them: a state written by an older migrate must read as it was written.
// Format 3 renamed two keys of a step's record, "inverse" (revert data)
// to "revert" and "record" (facts) to "facts", and changed nothing else.

// stepRecordV2 is a step's record in formats 1 and 2.
type stepRecordV2 struct {
	Addr       phases.Address    `json:"address"`
	Phase      string            `json:"phase"`
	Check      bool              `json:"check,omitempty"`
	Status     Status            `json:"status"`
	InputHash  string            `json:"input_hash,omitempty"`
	Outputs    json.RawMessage   `json:"outputs,omitempty"`
	Private    json.RawMessage   `json:"private,omitempty"`
	Inverse    *revertDataV2     `json:"inverse,omitempty"`
	Identity   string            `json:"identity,omitempty"`
	Upstream   map[string]string `json:"upstream,omitempty"`
	Record     map[string]string `json:"record,omitempty"`
	Attempts   int               `json:"attempts"`
	StartedAt  *time.Time        `json:"started_at,omitempty"`
	FinishedAt *time.Time        `json:"finished_at,omitempty"`
	LastError  string            `json:"last_error,omitempty"`
	Holder     *holderV2         `json:"holder,omitempty"`
}

// revertDataV2 is phases.RevertData in formats 1 and 2.
type revertDataV2 struct {
	Description string          `json:"description"`
	Data        json.RawMessage `json:"data,omitempty"`
}

// holderV2 is Holder in formats 1 and 2.
type holderV2 struct {
	LockID string `json:"lock_id"`
	PID    int    `json:"pid,omitempty"`
	Host   string `json:"host,omitempty"`
	User   string `json:"user,omitempty"`
	Lease  int64  `json:"lease,omitempty"`
}

// stateV1 is the format 1 file.
type stateV1 struct {
	Version        int                      `json:"version"`
	Serial         uint64                   `json:"serial"`
	Lineage        string                   `json:"lineage"`
	MigrateVersion string                   `json:"migrate_version"`
	Steps          map[string]*stepRecordV2 `json:"steps"`
}

// stateV2 is the format 1 file with a checksum: "sha256:" and the hex
// SHA-256 of everything else in the file, as marshalBody writes it with
// version 2 and these records.
type stateV2 struct {
	Version        int                      `json:"version"`
	Checksum       string                   `json:"checksum"`
	Serial         uint64                   `json:"serial"`
	Lineage        string                   `json:"lineage"`
	MigrateVersion string                   `json:"migrate_version"`
	Steps          map[string]*stepRecordV2 `json:"steps"`
}

// journalEntryV2 is a journal line written after a format 1 or 2
// snapshot.
type journalEntryV2 struct {
	Seq     uint64        `json:"seq"`
	Lineage string        `json:"lineage"`
	Time    time.Time     `json:"time"`
	Step    *stepRecordV2 `json:"step"`
	CRC     string        `json:"crc"`
}

// upgrade is r as a format 3 record: the same values, under the keys'
// new names. nil stays nil.
func (r *stepRecordV2) upgrade() *StepRecord {
	if r == nil {
		return nil
	}
	rec := &StepRecord{
		Addr: r.Addr, Phase: r.Phase, Check: r.Check, Status: r.Status,
		InputHash: r.InputHash, Outputs: r.Outputs, Private: r.Private,
		Identity: r.Identity, Upstream: r.Upstream, Facts: r.Record,
		Attempts: r.Attempts, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
		LastError: r.LastError,
	}
	if r.Inverse != nil {
		rec.Revert = &phases.RevertData{Description: r.Inverse.Description, Data: r.Inverse.Data}
	}
	if r.Holder != nil {
		rec.Holder = &Holder{LockID: r.Holder.LockID, PID: r.Holder.PID, Host: r.Holder.Host, User: r.Holder.User, Lease: r.Holder.Lease}
	}
	return rec
}

// upgradeSteps upgrades every record of a format 1 or 2 file; a null
// record stays null (for checkSnapshot to refuse).
func upgradeSteps(steps map[string]*stepRecordV2) map[string]*StepRecord {
	if steps == nil {
		return nil
	}
	out := make(map[string]*StepRecord, len(steps))
	for k, r := range steps {
		out[k] = r.upgrade()
	}
	return out
}
