// Package incustest holds what the Incus tests of providers/incus and
// providers/incus/incusapi share: where the daemon started by
// scripts/incus-up.sh is, whether it is the lab's Incus host instead
// (Lab, SkipInLab: `make test-incus-lab`), and a machine-wide limit on how
// many tests talk to it at once.
//
// The limit exists because incusd (6.0.4 here) can stall when several
// tests create, start, stop, snapshot and re-trust at once soon after it
// started: a container's lxc pre-start hook calls back into the daemon and
// gets no answer for 30 s, then its stop hooks neither, and every other
// operation waits behind them (seen in CI and reproduced: 90 s without an
// answer, then a failed start, in one run out of three with three tests at
// once after a daemon restart; none in a row of runs with one). Steps run
// in parallel inside one test (the engine stopping two old VMs together)
// have not shown it. Both test binaries run at the same time under
// `go test ./...`, so the limit is a set of flock(2)ed slot files, not a
// channel.
//
// It imports nothing of incusapi, so incusapi's own (internal) tests can
// use it.
package incustest
