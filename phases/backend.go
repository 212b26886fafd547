package phases

import "time"

// BackendConfig is the runbook's backend block: where the state and its
// lock live. Nil (no block) is the local backend, a directory beside the
// runbook.
type BackendConfig struct {
	// Type is "local" or "etcd".
	Type string
	// Path is a local backend's directory; empty is the default (beside
	// the runbook, or --state).
	Path      string
	Endpoints []string
	// Prefix is the etcd key prefix the state lives under.
	Prefix string
	// CA, Cert and Key are PEM file paths, absolute (relative ones are
	// resolved against the runbook directory by the loader).
	CA, Cert, Key string
	Username      string
	// Password is a secret: it is also in Runbook.Secrets, so that
	// whatever quotes it is redacted.
	Password string
	// Insecure allows a password over plaintext gRPC; without it a
	// password needs TLS (ca, or https:// endpoints).
	Insecure bool
	// LockTTL is how long the lock outlives a holder that died; 0 is the
	// backend's default.
	LockTTL time.Duration
	// Unknown lists the attributes whose value depends on variables given
	// no value (validate, graph and status leave them unknown): the block
	// cannot be used as it is.
	Unknown []string
	Range   Range
}
