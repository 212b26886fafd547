package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"time"
)

// The journal, journal.jsonl, has one line per checkpoint:
//
//	{"seq":N,"lineage":"…","time":"2006-01-02T15:04:05.999999999Z","step":{...StepRecord...},"crc":"xxxxxxxx"}
//
// seq is the serial of the state once the entry is applied, so the first
// entry after a snapshot of serial S has seq S+1. lineage is the state's,
// so a journal of another state is refused rather than skipped. crc is the
// CRC-32C, in hex, of the line's bytes before `,"crc":`: it tells a
// damaged line from a good one (every single-bit error and every burst of
// up to 32 bits changes it). Lines written by version 1 (no lineage, no
// crc) are still read after a version 1 snapshot.
//
// Lines are appended with a single write and synced before Checkpoint
// returns; Persist folds them into a new snapshot and then truncates the
// journal. Entries with seq <= the snapshot's serial are already in it (a
// crash between the snapshot's rename and the truncation) and are skipped;
// they must then end exactly at the snapshot's serial.

type journalEntry struct {
	Seq     uint64      `json:"seq"`
	Lineage string      `json:"lineage"`
	Time    time.Time   `json:"time"`
	Step    *StepRecord `json:"step"`
	CRC     string      `json:"crc"`

	line int  // 1-based line number in the journal
	old  bool // a line of format 2 after a snapshot of format 3
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const crcKey = `,"crc":"`

// appendJournalLine appends the journal line of seq to buf. step is the
// record in compact JSON (encoding/json output has no raw newlines).
func appendJournalLine(buf []byte, seq uint64, lineage string, now time.Time, step []byte) []byte {
	start := len(buf)
	buf = append(buf, `{"seq":`...)
	buf = strconv.AppendUint(buf, seq, 10)
	buf = append(buf, `,"lineage":`...)
	q, _ := json.Marshal(lineage) // a string always encodes
	buf = append(buf, q...)
	buf = append(buf, `,"time":"`...)
	buf = now.UTC().AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, `","step":`...)
	buf = append(buf, step...)
	sum := crc32.Checksum(buf[start:], castagnoli)
	buf = append(buf, crcKey...)
	buf = fmt.Appendf(buf, "%08x", sum)
	return append(buf, "\"}\n"...)
}

// parseJournal decodes the complete lines of data. The last line is left
// out when it is torn (a crash cut its write short, so its checkpoint never
// returned): no newline yet, or zero-filled by a filesystem that lost the
// write (two NUL bytes or more; a flipped bit makes at most one). A bad
// complete line is an error, and so is an unterminated one that is a whole
// entry followed by a byte other than a newline: a damaged newline, not a
// write cut short. valid is the length of the good prefix. Lines are read
// in the format of the snapshot they follow, version.
func parseJournal(data []byte, version int) (entries []journalEntry, valid int, err error) {
	off, line := 0, 1
	for off < len(data) {
		nl := bytes.IndexByte(data[off:], '\n')
		if nl < 0 {
			tail := bytes.TrimRight(data[off:], "\x00")
			if n := len(tail); n > 1 {
				if _, err := parseJournalLine(tail[:n-1], version); err == nil {
					return nil, 0, fmt.Errorf("journal line %d (byte %d): a whole entry followed by %q instead of a newline", line, off, tail[n-1:])
				}
			}
			break
		}
		end := off + nl
		e, err := parseJournalLine(data[off:end], version)
		if err != nil {
			if end+1 == len(data) && bytes.Count(data[off:end], []byte{0}) >= 2 {
				break
			}
			return nil, 0, fmt.Errorf("journal line %d (byte %d): %w", line, off, err)
		}
		e.line = line
		entries = append(entries, e)
		off, line = end+1, line+1
	}
	return entries, off, nil
}

// parseJournalLine decodes one line written after a snapshot of format
// version. After a snapshot of format 3, a line of format 2 is read too
// (marked old): the first writer of format 3 folds the journal into its
// snapshot, so such lines are those a crash kept between the snapshot's
// rename and the journal's truncation, and replay accepts them only as
// lines the snapshot already holds.
func parseJournalLine(b []byte, version int) (journalEntry, error) {
	e, err := decodeJournalLine(b, version)
	if err != nil && version >= 3 {
		if e2, err2 := decodeJournalLine(b, 2); err2 == nil {
			e, err = e2, nil
			e.old = true
		}
	}
	if err != nil {
		return e, err
	}
	if e.CRC != "" || e.Lineage != "" {
		// The crc must be the last thing on the line, as written.
		i := bytes.LastIndex(b, []byte(crcKey))
		if i < 0 || string(b[i+len(crcKey):]) != e.CRC+`"}` {
			return e, errors.New(`"crc" is not where migrate writes it`)
		}
		if sum := fmt.Sprintf("%08x", crc32.Checksum(b[:i], castagnoli)); sum != e.CRC {
			return e, fmt.Errorf("checksum mismatch (crc %s, the line hashes to %s): the line was damaged after it was written", e.CRC, sum)
		}
		if e.Lineage == "" {
			return e, errors.New(`no "lineage"`)
		}
	}
	if e.Seq == 0 {
		return e, errors.New(`no "seq"`)
	}
	if e.Step == nil {
		return e, errors.New(`no "step"`)
	}
	return e, validateRecord(e.Step)
}

// decodeJournalLine decodes a line in the records of format version.
func decodeJournalLine(b []byte, version int) (journalEntry, error) {
	if version >= 3 {
		var e journalEntry
		err := decodeStrict(b, &e)
		return e, err
	}
	var e2 journalEntryV2
	if err := decodeStrict(b, &e2); err != nil {
		return journalEntry{}, err
	}
	return journalEntry{Seq: e2.Seq, Lineage: e2.Lineage, Time: e2.Time, Step: e2.Step.upgrade(), CRC: e2.CRC}, nil
}

// replay folds entries onto s. It returns how many were applied. Lines of
// version 1 (no crc) are accepted only when legacy is set (the snapshot is
// version 1 too) or when the snapshot already holds them.
func replay(s *Snapshot, entries []journalEntry, legacy bool) (int, error) {
	applied := 0
	for i, e := range entries {
		switch {
		case e.CRC != "" && e.Lineage != s.Lineage:
			return applied, fmt.Errorf("%s belongs to another state: its lineage is %s, the snapshot's is %s", e.where(), e.Lineage, s.Lineage)
		case e.Seq <= s.Serial && applied == 0:
			// Already in the snapshot; if so, the next line is the
			// snapshot's serial + 1, or there is none and this was it.
			last := i+1 == len(entries) || entries[i+1].Seq > s.Serial
			if last && e.Seq != s.Serial {
				return applied, fmt.Errorf("%s is the last one older than the snapshot, whose serial is %d: the journal does not belong to this snapshot", e.where(), s.Serial)
			}
			if !last && entries[i+1].Seq != e.Seq+1 {
				return applied, fmt.Errorf("%s is followed by seq %d: entries are missing or out of order", e.where(), entries[i+1].Seq)
			}
			continue
		case e.Seq != s.Serial+1:
			return applied, fmt.Errorf("%s follows serial %d: entries are missing or out of order (is the journal from another state?)", e.where(), s.Serial)
		case e.old:
			return applied, fmt.Errorf("%s is in state format 2, while the snapshot before it is in format 3: the journal does not belong to this snapshot", e.where())
		case e.CRC == "" && !legacy:
			return applied, fmt.Errorf("%s has no checksum, and the snapshot is not of the version that wrote such lines", e.where())
		}
		s.Apply(e.Step)
		s.Serial = e.Seq
		applied++
	}
	return applied, nil
}

// where names e in an error about it.
func (e journalEntry) where() string {
	return fmt.Sprintf("journal line %d (seq %d)", e.line, e.Seq)
}

func marshalRecord(rec *StepRecord) ([]byte, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", rec.Addr, err)
	}
	return b, nil
}

// What another backend (state/etcdstate) shares with Local: the same
// records and journal entries, so every backend checks integrity and
// folds the same way.

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
// written by EncodeEntry in the current format.
func DecodeEntry(b []byte) (Entry, error) { return DecodeEntryOf(b, CurrentVersion) }

// DecodeEntryOf decodes an entry written after a snapshot of format
// version (DecodeSnapshotVersion says which), its record upgraded to the
// current format.
func DecodeEntryOf(b []byte, version int) (Entry, error) {
	e, err := parseJournalLine(b, version)
	if err != nil {
		return Entry{}, err
	}
	if e.old {
		return Entry{}, fmt.Errorf("an entry in state format 2 after a snapshot in format %d", version)
	}
	if e.CRC == "" {
		return Entry{}, errors.New("no checksum")
	}
	return Entry{Seq: e.Seq, Lineage: e.Lineage, Step: e.Step}, nil
}
