// Package etcdstate keeps a migration's state in etcd, for teams and CI
// runners that share one state: the same model as state.Local (a snapshot
// plus journal entries folded on load, lineage, serial, checksums), behind
// the same state.Manager interface.
//
// Keys, under Config.Prefix:
//
//	lock                  the holder's LockInfo (JSON), bound to its lease
//	head                  {"serial","lineage"}: rewritten by every write, whose
//	                      ModRevision every write compares (compare-and-swap)
//	snapshot/meta         which generation is current: lineage, serial,
//	                      chunk count, size and SHA-256 of the snapshot
//	snapshot/<gen>/NNNNNN the snapshot (state.EncodeSnapshot) in chunks of
//	                      at most 512 KiB, so no value grows with the steps
//	journal/<seq>         one journal entry per checkpoint since the snapshot
//	                      (state.EncodeEntry: CRC and lineage included)
//
// Every write is one transaction guarded by the lock key still being bound
// to this holder's lease and by head's ModRevision being the one this
// holder last wrote: two writers can never interleave. Checkpoints from
// concurrent goroutines share one transaction (group commit). Persist
// writes the chunks of a new generation first, then switches snapshot/meta,
// empties the journal and deletes the old generation in one transaction.
// A write whose outcome is unknown (a timeout) is settled by reading what
// the cluster holds, never assumed.
//
// Loading reads the whole prefix at one revision, verifies the snapshot's
// hash and every entry's CRC, and folds. A key under the prefix that
// migrate did not write is refused: the prefix holds something else.
//
// The lock is a lease of Config.LockTTL kept alive while the Store is
// open; a holder that dies loses it when the lease expires. A live holder
// learns of a loss at once (the lock key watched, the keepalive ended):
// Lost is closed, and the lock is taken back under a new lease only if it
// is free and head unchanged (so that steps cut off can be recorded);
// otherwise every later write gets ErrLockLost. A record written running
// names its holder and lease (state.Holder); RunningElsewhere refuses, to
// another holder, a step whose lease still lives.
//
// A password goes only over TLS, unless Config.Insecure says otherwise
// (Validate, Plaintext).
package etcdstate
