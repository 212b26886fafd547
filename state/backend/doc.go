// Package backend chooses where a runbook's state lives and opens it:
// the local files (package state) or etcd (package state/etcdstate).
//
// Parse reads a backend URL; Select applies the precedence (--backend,
// then MIGRATE_BACKEND, then the runbook's backend block, then the local
// files) and the credential rules (a user needs a password, which never
// comes from a URL). A Backend opens its state read-only or locked, reads
// and breaks its lock. Deferred is the lock-late session of the commands
// that write (run, rollback): the state read without its lock until
// Begin, which takes the lock only if the state is still the one planned
// against. Copy is state push and pull.
//
// cmd/migrate is its front end: it parses flags and shows what this
// package returns; this package shows nothing.
package backend
