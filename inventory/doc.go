// Package inventory reads a live Incus host, read-only, and judges it as
// the source of the move: what `migrate init` reports before it writes a
// runbook.
//
//	h, _ := inventory.Read(ctx, client)   // GETs, HEADs and read-only commands
//	site, guesses := inventory.Choose(h)  // the runbook's names, from the host
//	findings := append(guesses, inventory.Check(h, site)...)
//
// Read takes what the incus CLI shows of a host: the instances (type,
// state, expanded devices and config, profiles, boot.autostart,
// snapshots and their sizes, whether a running VM's agent answers, and
// which of the move's applications each runs, seen through the files
// API), the storage pools with their space and custom volumes (who uses
// each), the networks (managed or not, NAT, DHCP) and the hardware of
// /1.0/resources (GPUs with their PCI addresses and drivers, disks).
//
// Each application is read as it is installed (AppFacts, apps.go): how
// (a Debian package, a Compose project, by hand), its version, its
// configuration with every file it includes (Synapse's conf.d, Samba's
// include), its database (a SQLite file, or a PostgreSQL database: its
// name and host, never its password), the paths its libraries and
// shares name, its users' names, its hardware decoding, and which of
// sqlite3, python3 and Synapse's own Python the VM has. Files come
// through the files API; a database too: Jellyfin's jellyfin.db (and its
// -wal) is pulled into a temporary file here and its Users read by
// package sqlitefile, so a VM without python3 or sqlite3 is read all the
// same. What only a program knows comes from these commands, run
// through exec and nothing else (readOnlyCommands):
//
//	dpkg-query -W -f=${Version} PACKAGE     a package's version
//	docker compose ls --all --format json    the Compose projects
//	pdbedit -L                               Samba's accounts (not -w: no hashes leave the VM)
//	sh -c 'command -v sqlite3; command -v python3'
//
// None of them writes in the VM. Incus keeps each command's output in a
// log file of the instance, which Read deletes once read. Nothing else
// changes: a test holds it to that by comparing the host before and
// after, and the commands run with the lab's record of them.
//
// Choose maps the host onto the runbook's variables (examples/homelab's
// shape): which old VM runs the home services, which Synapse, which k3s;
// the pools, the LAN bridge, the data volume, the iGPU. What it cannot
// see (the router's address reservations, the domain) and what it picked
// among several are findings of kind "guess", so nothing is guessed
// silently.
//
// Check turns what was seen into findings, each with a stable code, what
// was seen and what to do: an old VM with no physical GPU (its video was
// decoded on the CPU), a GPU the Talos VM cannot have, a VM without the
// Incus agent (exec and file steps cannot reach it), boot.autostart on a
// VM the move stops, a pool without room for what the plan makes there,
// no bridge to the LAN, a data volume attached elsewhere; and for each
// application, how it is installed and what the move does about it
// (Synapse on PostgreSQL: pg_dump in the VM; no sqlite3: Synapse's own
// Python; decoding on the CPU: switched on on the node; Frigate in
// Compose: stopped through Compose; a release newer than the example's
// image: the image raised, never lowered).
package inventory
