// Package debroot makes the Debian root the lab's old VMs run on: Debian
// 12 (bookworm) from Debian's own packages by debootstrap (variant
// minbase, with python3, python3-psycopg2, python3-yaml, postgresql, samba,
// samba-common-bin, smbclient and procps; no sqlite3, which Debian's
// matrix-synapse only suggests), from the mirror apt uses, built once
// into a cache (~/.cache/migrate/debian-root/SUITE-KEY/root, the key
// naming the package list) under a lock, as lab/kubecp caches its
// binaries.
//
//	root, err := debroot.Root(ctx, t.Logf) // about a minute the first time
//
// build-debian-root.sh (beside this file, embedded: migrate-lab carries
// it; scripts/debian-root.sh runs it from the checkout in `make
// services`) does the work and needs root. MIGRATE_DEBIAN_ROOT names a
// ready root instead. lab/incushost seeds the old VMs from it (its /usr
// read-only below each instance's own files); lab/home chooses the layout.
package debroot
