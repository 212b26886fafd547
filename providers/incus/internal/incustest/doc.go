// Package incustest holds what the Incus tests of providers/incus and
// providers/incus/incusapi share: where the daemon started by
// scripts/incus-up.sh is, and a machine-wide limit on how many tests talk
// to it at once.
//
// The limit exists because incusd stalls when a burst of containers start
// and stop together on a small machine: its lxc hooks call back into the
// daemon, time out after 30 s each, and every operation waits behind them
// (seen in CI: 90 s without an answer, then a failed start). Both test
// binaries run at the same time under `go test ./...`, so the limit is a
// set of flock(2)ed slot files, not a channel.
//
// It imports nothing of incusapi, so incusapi's own (internal) tests can
// use it.
package incustest
