// Package state keeps what a migration has done: a versioned JSON snapshot
// of every step's record plus an append-only, fsynced journal of changes to
// those records, folded into the snapshot when the state is opened and when
// a command ends. A checkpoint is one journal append, so its cost does not
// grow with the number of steps.
//
// The engine talks to a Manager; Local is the default backend, a directory
// beside the runbook (.migrate/), and state/etcdstate keeps the same model
// in etcd, through what Local exports for it: EncodeSnapshot and
// DecodeSnapshot(Version), PrepareRecord, EncodeEntry and DecodeEntry(Of), the lock
// information (state/statetest is the suite both pass). A Lock guards
// every writing command. Import replaces a whole state (push/pull between
// backends), refusing a newer serial or another lineage unless forced.
//
// Local keeps four files, all mode 0600 in a 0700 directory:
//
//	state.json         snapshot: {version, checksum, serial, lineage, migrate_version, steps}
//	state.json.backup  the snapshot before the last one
//	journal.jsonl      one {"seq","lineage","time","step","crc"} line per checkpoint since the snapshot
//	lock               flock(2)ed by the writer, holding its LockInfo
//	logs/              one event log per writing command (see OpenLog)
//
// The serial grows by one per journal entry; an entry's seq is the serial
// after it, so entries already in the snapshot are skipped on replay. The
// lineage is set when the state is created and never changes. Snapshots are
// replaced atomically (temporary file, sync, rename, sync the directory).
// Concurrent checkpoints share one write and one sync (group commit).
//
// A snapshot carries the SHA-256 of its canonical encoding, a journal line
// its state's lineage and a CRC-32C of itself: a damaged byte anywhere is
// refused, never read as a different state.
//
// The format is version 4 (CurrentVersion), version 3's with a record's
// provider; version 3 is read as it is. Versions 1 and 2 (whose records
// kept revert data under "inverse" and facts under "record") are read
// through frozen copies of their types (v2.go), journal and etcd entries
// included, and written as 4 by the next writer: Local and etcdstate both
// write the snapshot again when they take the lock.
//
// Reading never writes. A file this build cannot use — garbled, truncated,
// a checksum that does not match, a bad complete journal line, a journal
// of another state, a newer format version — is an *UnusableError that
// names it and says how to recover, and the file is left as it is. A torn
// last journal line (a write cut short by a crash, never acknowledged) is
// ignored. The lock is released by the kernel when its
// holder dies, so a killed run never blocks the next one; Unlock removes
// the information a dead holder left behind.
package state
