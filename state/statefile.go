package state

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/homelab-migrate/migrate/phases"
)

// DecodeSnapshot decodes a snapshot (state.json, or what another backend
// stores: state/etcdstate) in any format version this build knows,
// upgraded in memory to CurrentVersion, its checksum verified. An empty
// input is ErrNoState; a newer version is a *NewerVersionError; anything
// else that does not decode is returned as is (Open wraps it in an
// *UnusableError naming the file).
func DecodeSnapshot(b []byte) (*Snapshot, error) {
	s, _, err := readSnapshot(b)
	return s, err
}

// DecodeSnapshotVersion is DecodeSnapshot that also says which format
// version b was in: a backend writes an older one again at once, and reads
// the journal entries after it in that version (DecodeEntryOf).
func DecodeSnapshotVersion(b []byte) (*Snapshot, int, error) {
	return readSnapshot(b)
}

// readSnapshot decodes b and also returns the format version it was in.
func readSnapshot(b []byte) (*Snapshot, int, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, 0, ErrNoState
	}
	// Only the version (and who wrote it, for the message) is looked at
	// first: the rest of the layout depends on it.
	var head struct {
		Version        *json.RawMessage `json:"version"`
		MigrateVersion json.RawMessage  `json:"migrate_version"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, 0, fmt.Errorf("not a state file: %w", jsonErr(b, err))
	}
	if head.Version == nil {
		return nil, 0, errors.New(`not a state file: no "version" field`)
	}
	var version int
	if err := json.Unmarshal(*head.Version, &version); err != nil {
		return nil, 0, fmt.Errorf(`not a state file: "version" is %s, want a number`, *head.Version)
	}
	// Each format decodes into its own types (formats 1 and 2: the frozen
	// ones of v2.go) and is upgraded to the current one in memory.
	switch {
	case version > CurrentVersion:
		var by string
		_ = json.Unmarshal(head.MigrateVersion, &by)
		return nil, version, &NewerVersionError{Version: version, MigrateVersion: by}
	case version == 3, version == 4:
		s, err := readCurrent(b, version)
		return s, version, err
	case version == 2:
		s, err := readV2(b)
		return s, version, err
	case version == 1:
		var s1 stateV1
		if err := decodeStrict(b, &s1); err != nil {
			return nil, version, err
		}
		s, err := checkSnapshot(s1.Serial, s1.Lineage, s1.MigrateVersion, upgradeSteps(s1.Steps))
		if err == nil {
			// Version 1 kept errors whole, megabytes of them at times.
			for _, rec := range s.Steps {
				rec.LastError = CutError(rec.LastError, "")
			}
		}
		return s, version, err
	default:
		return nil, 0, fmt.Errorf("unsupported state format version %d", version)
	}
}

// stateV3 is the file this build writes: format 2's layout, its records'
// keys renamed ("revert", "facts"); format 4 adds a record's provider,
// which format 3's records lack (so they decode as they are).
type stateV3 struct {
	Version        int                    `json:"version"`
	Checksum       string                 `json:"checksum"`
	Serial         uint64                 `json:"serial"`
	Lineage        string                 `json:"lineage"`
	MigrateVersion string                 `json:"migrate_version"`
	Steps          map[string]*StepRecord `json:"steps"`
}

// readCurrent reads a snapshot of format 3 or 4 (version).
func readCurrent(b []byte, version int) (*Snapshot, error) {
	var s3 stateV3
	if err := decodeStrict(b, &s3); err != nil {
		return nil, err
	}
	if err := verifyChecksum(s3.Checksum, func() ([]byte, error) {
		return encodeBody(version, s3.Serial, s3.Lineage, s3.MigrateVersion, s3.Steps)
	}); err != nil {
		return nil, err
	}
	return checkSnapshot(s3.Serial, s3.Lineage, s3.MigrateVersion, s3.Steps)
}

func readV2(b []byte) (*Snapshot, error) {
	var s2 stateV2
	if err := decodeStrict(b, &s2); err != nil {
		return nil, err
	}
	if err := verifyChecksum(s2.Checksum, func() ([]byte, error) {
		return encodeBody(2, s2.Serial, s2.Lineage, s2.MigrateVersion, s2.Steps)
	}); err != nil {
		return nil, err
	}
	return checkSnapshot(s2.Serial, s2.Lineage, s2.MigrateVersion, upgradeSteps(s2.Steps))
}

// verifyChecksum compares a file's checksum with that of what was decoded
// from it, encoded again by body, so any change of content (a flipped bit
// in a timestamp, a serial, an output) is refused, while a change that
// decodes to the same thing is not one.
func verifyChecksum(sum string, body func() ([]byte, error)) error {
	if sum == "" {
		return errors.New(`no "checksum"`)
	}
	b, err := body()
	if err != nil {
		return err
	}
	if got := checksum(b); got != sum {
		return fmt.Errorf("checksum mismatch: the file says %q, its content hashes to %q: "+
			"it was damaged (or edited) after migrate wrote it", sum, got)
	}
	return nil
}

func checksum(body []byte) string {
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// checkSnapshot validates a decoded snapshot, its records upgraded to
// the current type.
func checkSnapshot(serial uint64, lineage, migrateVersion string, steps map[string]*StepRecord) (*Snapshot, error) {
	if lineage == "" {
		return nil, errors.New(`no "lineage"`)
	}
	if steps == nil {
		steps = map[string]*StepRecord{}
	}
	for key, rec := range steps {
		if rec == nil {
			return nil, fmt.Errorf("step %q: null record", key)
		}
		if err := validateRecord(rec); err != nil {
			return nil, fmt.Errorf("step %q: %w", key, err)
		}
		if rec.Addr.String() != key {
			return nil, fmt.Errorf("step %q: record has address %q", key, rec.Addr)
		}
	}
	return &Snapshot{
		Version:        CurrentVersion,
		Serial:         serial,
		Lineage:        lineage,
		MigrateVersion: migrateVersion,
		Steps:          steps,
	}, nil
}

// EncodeSnapshot encodes s as Local writes state.json, in CurrentVersion
// whatever s.Version says: indented, one step record
// per line (compact, so outputs and provider data keep their bytes), steps
// sorted by address, with the checksum of that encoding on the second line.
func EncodeSnapshot(s *Snapshot) ([]byte, error) {
	body, err := marshalBody(s)
	if err != nil {
		return nil, err
	}
	if bytes.Contains(body, []byte(`\ufffd`)) {
		// A string was not valid UTF-8 and encoding/json replaced it:
		// the checksum must be of what a reader will decode.
		var s3 stateV3
		if err := json.Unmarshal(body, &s3); err != nil {
			return nil, err
		}
		c := *s
		c.Lineage, c.MigrateVersion, c.Steps = s3.Lineage, s3.MigrateVersion, s3.Steps
		if body, err = marshalBody(&c); err != nil {
			return nil, err
		}
	}
	head := fmt.Appendf(nil, "{\n  \"version\": %d,\n", CurrentVersion)
	out := fmt.Appendf(nil, "%s  \"checksum\": %q,\n", head, checksum(body))
	return append(out, body[len(head):]...), nil
}

// marshalBody is the canonical encoding of s the checksum is taken of: the
// file without its checksum line. Any change to it is a format change and
// needs a new version.
func marshalBody(s *Snapshot) ([]byte, error) {
	return encodeBody(CurrentVersion, s.Serial, s.Lineage, s.MigrateVersion, s.Steps)
}

// encodeBody is marshalBody for a format's own records (formats 2 and 3
// share the layout; the records differ).
func encodeBody[R any](version int, serial uint64, lineage, migrateVersion string, steps map[string]R) ([]byte, error) {
	str := func(v string) []byte { b, _ := json.Marshal(v); return b }
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "{\n  \"version\": %d,\n  \"serial\": %d,\n  \"lineage\": %s,\n  \"migrate_version\": %s,\n  \"steps\": {",
		version, serial, str(lineage), str(migrateVersion))
	for i, key := range slices.Sorted(maps.Keys(steps)) {
		rec, err := json.Marshal(steps[key])
		if err != nil {
			return nil, fmt.Errorf("step %s: %w", key, err)
		}
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString("\n    ")
		buf.Write(str(key))
		buf.WriteString(": ")
		buf.Write(rec)
	}
	if len(steps) > 0 {
		buf.WriteString("\n  ")
	}
	buf.WriteString("}\n}\n")
	return buf.Bytes(), nil
}

// decodeStrict decodes exactly one JSON value into v, refusing unknown
// fields and trailing data.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonErr(b, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("unexpected data after the JSON object at byte %d", dec.InputOffset())
	}
	return nil
}

// jsonErr turns truncated input into an error that says so.
func jsonErr(b []byte, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("truncated JSON (%d bytes)", len(b))
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("invalid JSON at byte %d: %v", se.Offset, err)
	}
	return err
}

var knownStatus = map[Status]bool{
	Pending: true, Running: true, Done: true, Failed: true,
	Reverting: true, Reverted: true, RevertFailed: true,
}

func validateRecord(rec *StepRecord) error {
	if rec.Addr.IsZero() {
		return errors.New("record has no address")
	}
	if !knownStatus[rec.Status] {
		return fmt.Errorf("record %s has unknown status %q", rec.Addr, rec.Status)
	}
	if rec.MovedFrom != "" {
		if _, err := phases.ParseAddress(rec.MovedFrom); err != nil {
			return fmt.Errorf("record %s moved from %q: %w", rec.Addr, rec.MovedFrom, err)
		}
	}
	return nil
}

// Clone returns a deep copy of r.
func (r *StepRecord) Clone() *StepRecord {
	c := *r
	c.Outputs = bytes.Clone(r.Outputs)
	c.Private = bytes.Clone(r.Private)
	if r.Revert != nil {
		inv := *r.Revert
		inv.Data = bytes.Clone(inv.Data)
		c.Revert = &inv
	}
	c.Facts = maps.Clone(r.Facts)
	c.Upstream = maps.Clone(r.Upstream)
	if r.Holder != nil {
		h := *r.Holder
		c.Holder = &h
	}
	if r.StartedAt != nil {
		t := *r.StartedAt
		c.StartedAt = &t
	}
	if r.FinishedAt != nil {
		t := *r.FinishedAt
		c.FinishedAt = &t
	}
	return &c
}

// Clone returns a deep copy of s.
func (s *Snapshot) Clone() *Snapshot {
	c := *s
	c.Steps = make(map[string]*StepRecord, len(s.Steps))
	for k, r := range s.Steps {
		c.Steps[k] = r.Clone()
	}
	return &c
}
