// Package local is the provider for work on the machine running migrate. Its
// step types are:
//
//   - exec: run a command given as an argv list (no shell unless the argv
//     is ["sh", "-c", ...]), with env, dir, an optional revert command run by
//     rollback, and creates = PATH to skip it once PATH exists;
//   - http_check: wait until a URL answers an expected HTTP status, as a step
//     or a check;
//   - approval: a human gate that records who approved and when;
//   - wait: a pause of a given duration.
//
// Commands are fail-stop: each runs as PID 1 of a fresh PID namespace with
// a parent-death signal, so when migrate dies, even by SIGKILL, the kernel
// kills the command and every process it started. Without the privilege to
// make a namespace, the command gets its own process group and the
// parent-death signal instead, which covers the command itself but not its
// children if migrate is killed outright. Command output goes to the log
// writer the engine passes in, with sensitive values replaced, and never
// into outputs or state.
//
// The engine (package engine) drives the provider through
// providers.Interface; cmd/migrate registers New under the type "local".
package local
