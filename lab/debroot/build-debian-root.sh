#!/usr/bin/env bash
# build-debian-root.sh: a Debian root for the lab's old VMs, made once by
# debootstrap from Debian's own packages and cached; prints its directory.
#
#   build-debian-root.sh          build it if the cache has none; print DIR/root
#
# The mirror is the one apt uses for this machine's release (apt's own
# sources, read through `apt-get indextargets`): nothing is hard-coded.
# DEBIAN_ROOT_CACHE moves the cache (default ~/.cache/migrate/debian-root);
# the key is the suite, the variant and the package list, so a new list
# builds a new root beside the old one. A lock lets two builds wait for
# each other instead of colliding. Needs root (debootstrap does).
set -euo pipefail
suite=${DEBIAN_ROOT_SUITE:-bookworm}
# What the old VMs run from Debian: systemd's unit files come with the
# packages, Python for Synapse's venv, PostgreSQL, Samba with its tools.
# NOT sqlite3: Debian's matrix-synapse only suggests it.
packages=python3,python3-psycopg2,python3-yaml,postgresql,samba,samba-common-bin,smbclient,procps
cache=${DEBIAN_ROOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/migrate/debian-root}
log() { echo "debian-root: $*" >&2; }

key=$(printf '%s\n' "$suite" minbase "$packages" | sha256sum | cut -c1-12)
dir=$cache/$suite-$key
if [ -f "$dir/ready" ]; then
	echo "$dir/root"
	exit 0
fi
mkdir -p "$cache"
exec 9>"$dir.lock"
flock 9
if [ -f "$dir/ready" ]; then # built by the one we waited for
	echo "$dir/root"
	exit 0
fi

if ! command -v debootstrap >/dev/null; then
	log "debootstrap is not installed: run scripts/debian-root.sh (or apt-get install debootstrap) as root"
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	log "debootstrap needs root: run scripts/debian-root.sh as root once (the root is cached in $cache)"
	exit 1
fi
mirror=$(apt-get indextargets --format '$(REPO_URI)' 'Identifier: Packages' "Release: $suite" 2>/dev/null | head -n1)
if [ -z "$mirror" ]; then
	log "apt has no source for Debian $suite (see /etc/apt/sources.list.d): add one and run apt-get update"
	exit 1
fi

start=$(date +%s)
log "building a Debian $suite root (debootstrap --variant=minbase, with $packages) from $mirror, once (about a minute; cached in $dir)"
rm -rf "$dir.tmp"
mkdir -p "$dir.tmp"
if ! debootstrap --variant=minbase --include="$packages" "$suite" "$dir.tmp/root" "$mirror" >"$dir.tmp/debootstrap.log" 2>&1; then
	tail -n 20 "$dir.tmp/debootstrap.log" >&2
	log "debootstrap failed (the whole log: $dir.tmp/debootstrap.log)"
	exit 1
fi
# The packages' archives and apt's lists are not part of a host.
rm -rf "$dir.tmp/root/var/cache/apt/archives/"*.deb "$dir.tmp/root/var/lib/apt/lists/"*
if [ -e "$dir.tmp/root/usr/bin/sqlite3" ]; then
	log "the root has /usr/bin/sqlite3, which Debian's matrix-synapse does not install"
	exit 1
fi
rm -rf "$dir"
mv "$dir.tmp" "$dir"
touch "$dir/ready"
log "built in $(($(date +%s) - start)) s: $dir/root"
echo "$dir/root"
