// Package incusapi is a small typed client for the documented Incus REST API
// (/1.0/...), written for the migrate incus provider. It deliberately does not
// use github.com/lxc/incus (flagged for unfixed security problems).
//
// Transports: the local unix socket (Options.Socket, default
// /var/lib/incus/unix.socket) or HTTPS with a client certificate
// (Options.URL, ClientCert, ClientKey) and the server's own certificate pinned
// by exact match (Options.ServerCert), as the incus CLI does with its
// servercerts/ directory. RemoteOptions reads the incus CLI's config.yml so a
// named remote just works.
//
// Endpoints: the server, instances (state, snapshots), certificates, the
// custom volumes of a storage pool (volumes.go), the DHCP leases of a
// managed network (networks.go), commands run in an instance (exec.go)
// and its files (files.go); updates take the ETag of a read.
//
// Behaviour of the real daemon (Incus 6.0) that this client handles:
//
//   - Every mutation answers 202 with an operation. The client waits on it at
//     once with GET /1.0/operations/{id}/wait (a long poll, never
//     sleep-polling); finished operations vanish after about 5 s.
//   - A failed operation is reported by the wait with HTTP 200 and a body of
//     type "error" (error_code 400/500) or a sync body whose metadata.status is
//     "Failure" with metadata.err; the body decides, not the HTTP status.
//   - The wait's own ?timeout=N expiry is reported exactly like a failure
//     ("context deadline exceeded", 500), so the client waits with timeout=-1
//     and ends the wait by cancelling the HTTP request when ctx ends.
//   - InstanceStatePut.Timeout = 0 sent as is means "stop NOW" (a forced
//     stop) to the daemon; this client sends -1 (the daemon's default: wait
//     for the guest, capped at 600 s) when Timeout is 0 and Force is false.
//   - A graceful stop that times out fails with "Failed shutting down
//     instance ... context deadline exceeded" (500) and the instance keeps
//     running; errors.Is(err, ErrShutdownTimeout) reports it. Until a forced
//     stop, the daemon then refuses updates with "Instance is busy running a
//     "stop" operation".
//   - Stopping a stopped instance (or starting a running one) fails with "The
//     instance is already stopped/running": errors.Is(err, ErrAlreadyInState).
//   - An exec in record-output mode (no websocket) is an operation of class
//     "task" that the daemon refuses to cancel ("This operation can't be
//     cancelled"); it runs to its end even when the client goes away. Its
//     output files, exec_{operation}.stdout and .stderr under
//     logs/exec-output/, exist from the start and answer range requests,
//     so they can be followed while it runs. A missing program fails the
//     POST itself ("Command not found"); a missing cwd does not fail.
//   - The files API answers a file with its bytes and a directory with the
//     JSON envelope listing its names; owner, mode and type come in
//     X-Incus-* headers. It refuses to delete a directory that is not
//     empty, and to push into a directory that does not exist (404). An
//     overwrite keeps the file's mode and owner: the X-Incus-mode, -uid and
//     -gid headers only apply to a file it creates.
//   - Plain API errors use real HTTP status codes (404 unknown instance, 412
//     ETag mismatch, 403 untrusted client over HTTPS).
package incusapi
