// Package local is the provider for work on the machine running migrate. Its
// step types are:
//
//   - exec: run a command given as an argv list (no shell unless the argv
//     is ["sh", "-c", ...]), with env, dir, an optional revert command run by
//     rollback, and creates = PATH to skip it once PATH exists;
//   - http_check: wait until a URL answers an expected HTTP status (and,
//     with contains, a body holding a text), as a step or a check; an
//     https:// URL's certificate is verified against the system's CAs, or
//     only those of the PEM file ca (a server of its own CA), and a
//     certificate not trusted is said so, with what to change;
//   - smb_check (smb.go): wait until an SMB server lists the shares
//     named (SMB2, NTLM as guest or an account, the list of IPC$ as
//     smbclient -L asks it), as a step or a check: a file server's
//     health as its clients see it;
//   - approval: a human gate that records who approved and when;
//   - wait: a pause of a given duration.
//
// Commands are fail-stop: every command of a provider runs inside one PID
// namespace, held open by a small shell that has the parent-death signal
// (and waits behind a gate until the signal is armed), so when migrate
// dies, even by SIGKILL, the kernel kills the shell and with it every
// process in the namespace. Each command also leads its own process group,
// killed when the command exits. Without the privilege to make a
// namespace, the command gets its own process group and the parent-death
// signal instead, which covers the command itself but not its children if
// migrate is killed outright. (runNamespace in pidns_linux.go.) Command output goes to the log
// writer the engine passes in, with sensitive values replaced by the SDK's
// writer, and never into outputs or state.
//
// Each step type is one sdk.StepType declaration (name, description,
// attributes struct as its schema, outputs, rollback sentence, handlers)
// in its own file (exec.go, http.go, smb.go; approval and wait in gates.go),
// listed in New; the SDK (package providers/sdk) gates, decodes and scrubs
// every call. The engine (package engine) drives the provider through
// providers.Interface; cmd/migrate registers New under the type "local".
package local
