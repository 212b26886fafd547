// Package statetest is the conformance suite every state backend passes
// (state.Local, etcdstate.Store): what the engine and the CLI rely on,
// whatever holds the state. Backend-specific behaviour (torn journal
// lines, fsync, lease expiry) is tested beside each backend.
package statetest
