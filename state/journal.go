package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// The journal, journal.jsonl, has one line per checkpoint:
//
//	{"seq":N,"time":"2006-01-02T15:04:05.999999999Z","step":{...StepRecord...}}
//
// seq is the serial of the state once the entry is applied, so the first
// entry after a snapshot of serial S has seq S+1. Lines are appended with a
// single write and synced before Checkpoint returns; Persist folds them into
// a new snapshot and then truncates the journal. Entries with seq <= the
// snapshot's serial are already in it (a crash between the snapshot's
// rename and the truncation) and are skipped.

type journalEntry struct {
	Seq  uint64      `json:"seq"`
	Time time.Time   `json:"time"`
	Step *StepRecord `json:"step"`
}

// appendJournalLine appends the journal line of seq to buf. step is the
// record in compact JSON (encoding/json output has no raw newlines).
func appendJournalLine(buf []byte, seq uint64, now time.Time, step []byte) []byte {
	buf = append(buf, `{"seq":`...)
	buf = strconv.AppendUint(buf, seq, 10)
	buf = append(buf, `,"time":"`...)
	buf = now.UTC().AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, `","step":`...)
	buf = append(buf, step...)
	return append(buf, "}\n"...)
}

// parseJournal decodes the complete lines of data. The last line is left
// out when it is torn (no newline, or not a valid entry): a crash cut its
// write short, so its checkpoint never returned. A bad line before the last
// is an error. valid is the length of the good prefix.
func parseJournal(data []byte) (entries []journalEntry, valid int, err error) {
	off, line := 0, 1
	for off < len(data) {
		nl := bytes.IndexByte(data[off:], '\n')
		if nl < 0 {
			break
		}
		end := off + nl
		e, err := parseJournalLine(data[off:end])
		if err != nil {
			if end+1 == len(data) {
				break
			}
			return nil, 0, fmt.Errorf("journal line %d (byte %d): %w", line, off, err)
		}
		entries = append(entries, e)
		off, line = end+1, line+1
	}
	return entries, off, nil
}

func parseJournalLine(b []byte) (journalEntry, error) {
	var e journalEntry
	if err := decodeStrict(b, &e); err != nil {
		return e, err
	}
	if e.Seq == 0 {
		return e, errors.New(`no "seq"`)
	}
	if e.Step == nil {
		return e, errors.New(`no "step"`)
	}
	return e, validateRecord(e.Step)
}

// replay folds entries onto s. It returns how many were applied.
func replay(s *Snapshot, entries []journalEntry) (int, error) {
	applied := 0
	for _, e := range entries {
		switch {
		case e.Seq <= s.Serial && applied == 0:
			continue // already in the snapshot
		case e.Seq != s.Serial+1:
			return applied, fmt.Errorf("journal entry with seq %d follows serial %d: entries are missing or out of order (is the journal from another state?)", e.Seq, s.Serial)
		}
		s.Steps[e.Step.Addr.String()] = e.Step
		s.Serial = e.Seq
		applied++
	}
	return applied, nil
}

func marshalRecord(rec *StepRecord) ([]byte, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", rec.Addr, err)
	}
	return b, nil
}
