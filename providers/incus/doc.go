// Package incus is the provider for Incus hosts: the migration starts and
// ends there. The Talos VM is created on Incus, and the old VMs (home
// services, Matrix, k3s) are stopped, never deleted, and kept so that
// `migrate rollback` can start them again.
//
// It speaks the documented REST API through the typed client in the
// incusapi sub-package (unix socket, or HTTPS with a client certificate and
// the server's certificate pinned; the incus CLI's remotes work as they
// are), never github.com/lxc/incus.
//
// Step types:
//
//   - incus_instance: ensures an instance exists (or, with ensure =
//     "absent", that it is gone), with its type, image or empty disk, CPU and
//     memory limits, profiles, config keys and devices: a directory shared
//     into a VM through virtiofs, an extra block disk, a GPU, an ISO. The plan
//     shows the config and device diff against the live instance; updates
//     carry the ETag read at plan time, so a concurrent change is refused,
//     never overwritten. The revert data deletes what the step created, or
//     restores the previous config and devices. Its outputs are what the
//     next steps need from a new instance: status, and the ipv4, ipv6
//     (scope global) and mac of one NIC — the nic device named by nic,
//     else the first nic device in name order (eth0 before eth1), found
//     in the guest by its MAC. The guest reports the addresses (a
//     container; a VM with the Incus agent); for a VM without the agent
//     the managed network's DHCP lease of that MAC does (address.go).
//     wait_for = "ipv4" (or "ipv6") makes apply wait for the address up
//     to wait_timeout (2m), failing with what was last seen; Read fills
//     the outputs too, and sends a run that stopped before the address
//     came back to apply (and wait).
//   - incus_instance_state: stops (or starts) an instance, gracefully with a
//     timeout and by force only when asked, optionally after a snapshot. A
//     stopped instance is marked in its own config (user.migrate.*) as kept
//     for rollback; the revert data starts it again and restores the snapshot
//     when asked.
//   - incus_snapshot: creates, restores or deletes a named snapshot.
//   - incus_volume: ensures a custom storage volume (pool, size, content
//     type, config keys), or imports source_file as an ISO volume
//     (volume_import.go: the file's SHA-256 is an input and the volume's
//     mark); the revert data deletes what it created, or restores the config
//     it changed. A volume without pool goes to the pool of the default
//     profile's root disk, asked of the daemon as incus does
//     (default_pool.go; "local" on IncusOS), and the plan says so.
//   - incus_device: attaches one device (instance, name, device: its
//     type and options) to an instance that exists, or detaches one
//     (ensure = "absent"; a profile's is masked with type = "none"), with
//     the ETag the plan read; on a running instance the daemon hot-plugs
//     it, and a refused hotplug says to stop the instance first. A device
//     of that name from a profile, or with other options, is planned as
//     a change; the revert data keeps the instance's own previous device
//     (none: rollback removes it) and the instance's UUID, so a rollback
//     never touches an instance made again under the name. Outputs:
//     instance, name and a disk's path (device.go, device_apply.go).
//   - incus_exec: runs an argv inside an instance (env, user, group, cwd,
//     timeout), its output streamed to the step's log line by line, its
//     exit code an output; a non-zero exit fails with the last lines. It
//     uses the exec API's record-output mode, not its websockets: the
//     command runs detached in the daemon, so it finishes even when
//     migrate is killed (with websockets a lost client can take the
//     command down half-way), and the output files are followed with
//     range requests while it runs; no websocket module, no terminal.
//     The price: Incus refuses to cancel such an operation, so past its
//     timeout the command's processes are found by MIGRATE_EXEC_ID, a
//     random marker in their environment, and killed by a second command
//     (sh, grep and kill in the instance; without them the error says the
//     command may still run). creates, a path in the instance, is looked for through the
//     files API in Read, Plan and Apply: once it exists the command is
//     never run again; before a run, commands still running in the
//     instance (a killed run's) are waited for and creates is looked for
//     again, which makes a resumed run exactly-once. The revert data runs
//     revert, with the env taken from the configuration again (never kept
//     in the state). The daemon keeps a command's output files until a
//     client deletes them: they are deleted once the command is seen to
//     its end, and its operation is saved in the step's record as it
//     starts (sdk.Intend), so that the next run, or rollback, deletes
//     those of a command a killed run left, once it has ended.
//   - incus_file: pushes a local file or tree into an instance, or pulls
//     one out (file.go; the trees in file_tree.go). Local files are
//     written 0600 through a temporary file and a rename, into a
//     directory that must exist (never made: a mistyped host path fails
//     the plan, unless a step it depends on runs first); into a .age
//     path, encrypted in memory to the runbook's .age-recipients, so the
//     clear bytes never touch the disk. Outputs: the SHA-256 of the file
//     (of the clear content for .age), or of a tree's sorted "path
//     sha256" manifest, its size and file count. A destination with the
//     same content, mode and owner is left alone (a directory that is
//     there keeps its own mode and owner); a local source that is a link
//     is followed, links inside a tree and in the instance are not
//     copied. A replaced file is first kept beside itself as
//     PATH.migrate-orig (in the instance for a push, locally for a pull),
//     so the state holds no content; the revert data puts it back and removes
//     what was created. That revert data is saved in the step's record
//     before anything is changed (sdk.Intend), with the SHA-256 of each
//     file a push keeps (the files API cannot rename: a kept copy a kill
//     cut short is told by it, made again from the file, never put
//     back); locally the move aside is one rename. A replace a kill
//     interrupted is so finished by the next run, or undone by rollback,
//     never taken for a file the copy created. A tree in the instance is read name by name from
//     its listings, which a VM's agent makes: a name that is not one
//     element (empty, ".", "..", with "/" or NUL), a name twice, a tree
//     deeper than 64 directories or with more than max_files entries
//     (100000) is refused before anything is copied, naming the
//     instance and the directory. Every local write of a pull goes
//     through an os.Root at the destination's directory, so no name and
//     no local link leads outside it.
//   - incus_sync: copies a directory tree to another inside one instance
//     (the old VM's data onto the volume attached to it) with the
//     instance's own tools, through sync.sh, embedded and run with sh -c
//     over the exec API as incus_exec runs its commands (sync.go). The
//     warm pass runs while the service does; the final pass, once it is
//     stopped, copies only what changed and verifies (sync_pass.go). Go
//     decides, the script lists (find and one stat per batch of names),
//     hashes and copies: its records are NUL-terminated, bounded, parsed
//     without trusting them, each name checked to be one under its root;
//     the operations go back to it as a work file of single-quoted names
//     written through the files API (the exec API's JSON cannot carry a
//     name that is not UTF-8). The manifest of the destination
//     (/var/lib/migrate-sync/DEST-ESCAPED.manifest, on the instance's
//     root disk: Incus' files API does not see a disk attached to a
//     running container) keeps each file's size, mtime and SHA-256
//     on both sides, so the final pass hashes only what changed since,
//     and the critical files; it also tells a destination something else
//     changed between the passes, and marks what a pass is changing
//     before it does, so that a killed pass is not taken for that.
//
// The cleanup guard: deleting an instance marked keep_for_rollback is
// refused at plan time unless the step says retain_until and that date has
// passed.
//
// Read observes the live instance for every step type, so the engine can
// resume an interrupted run (a stop that finished before the crash is
// adopted with its revert data) and detect drift.
//
// Each step type is one file: its attributes struct (the schema, with the
// descriptions) and typed handlers on providers/sdk, which does the
// envelope: gating, decoding, default outputs and the scrubbing of every
// field that leaves the provider (values marked sensitive become
// phases.Redacted in diffs, logs, diagnostics and revert data).
//
// The engine drives the provider through providers.Interface; cmd/migrate
// registers Factory under the type "incus". The tests run against a real
// Incus daemon started by scripts/incus-up.sh.
package incus
