#!/usr/bin/env bash
# debian-root.sh: install debootstrap and build the Debian root of the
# lab's old VMs into its cache (lab/debroot/build-debian-root.sh), so
# that tests do not pay its minute mid-run. Idempotent; needs root.
#
# Prints DEBIAN_ROOT=DIR on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v debootstrap >/dev/null; then
	echo "debian-root: installing debootstrap" >&2
	apt-get install -y --no-install-recommends debootstrap >&2 ||
		{ apt-get update >&2 && apt-get install -y --no-install-recommends debootstrap >&2; }
fi
echo "DEBIAN_ROOT=$(bash "$here/../lab/debroot/build-debian-root.sh")"
