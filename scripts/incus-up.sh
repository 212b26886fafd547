#!/usr/bin/env bash
# incus-up.sh: install Incus 6.0 (Debian bookworm-backports) and start the
# daemon without systemd, idempotently, ready for the Incus provider's tests.
#
#   scripts/incus-up.sh           install if needed, start if not running
#   scripts/incus-up.sh --down    stop what this script started
#
# Prints the facts the tests need as KEY=VALUE lines on stdout:
#   INCUS_SOCKET, INCUS_HTTPS, INCUS_SERVER_CERT, INCUS_TEST_IMAGE,
#   INCUS_TEST_NETWORK, INCUS_TEST_NET_IMAGE.
# Why it is done this way: docs/design.md ("Tests and real servers").
set -euo pipefail

state=${INCUS_LAB_DIR:-/var/lib/migrate-lab/incus}
https_addr=${INCUS_HTTPS_ADDR:-127.0.0.1:8443}
image_alias=migrate-busybox
# A managed bridge with DHCP (the daemon's dnsmasq) for the tests of the
# instance's address outputs. It is on no profile: other tests' containers
# stay without a network, as before; a test attaches a nic to it.
network=${INCUS_TEST_NETWORK:-migratebr0}
network_v4=${INCUS_TEST_NETWORK_V4:-10.97.0.1/24}
net_image_alias=migrate-busybox-dhcp
mkdir -p "$state"
log() { echo "incus-up: $*" >&2; }
# quiet CMD...: its output goes to a log, shown only if it fails.
quiet() {
	"$@" >"$state/setup.log" 2>&1 || { local rc=$?; cat "$state/setup.log" >&2; log "failed: $*"; return $rc; }
}

incusd_bin=/usr/libexec/incus/incusd
export PATH="/usr/libexec/incus:/usr/sbin:/sbin:$PATH"

if [ "${1:-}" = "--down" ]; then
	if [ -f "$state/incusd.pid" ] && kill -0 "$(cat "$state/incusd.pid")" 2>/dev/null; then
		for i in $(incus list --format csv -c n 2>/dev/null); do incus stop --force "$i" >/dev/null 2>&1 || true; done
		timeout 70 "$incusd_bin" shutdown --timeout 60 || kill "$(cat "$state/incusd.pid")" || true
	fi
	rm -f "$state/incusd.pid"
	exit 0
fi

# 1. Packages, from bookworm-backports: the same mirror and key as the
#    system's own Debian entries, read from its sources.
install() {
	local src=/etc/apt/sources.list.d/migrate-backports.sources
	if [ ! -f "$src" ]; then
		local uri
		uri=$(awk '/^URIs:/ && !/security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
		if [ -z "$uri" ]; then
			uri=$(awk '$1=="deb" && $3=="bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
		fi
		[ -n "$uri" ] || { log "cannot find the Debian mirror in the apt sources"; exit 1; }
		cat >"$src" <<SRC
Types: deb
URIs: $uri
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
	fi
	log "installing incus from bookworm-backports"
	export DEBIAN_FRONTEND=noninteractive
	quiet apt-get update -qq
	quiet apt-get install -y -qq -t bookworm-backports --no-install-recommends \
		incus-base incus-client dnsmasq-base busybox-static
}
if [ ! -x "$incusd_bin" ] || ! command -v incus >/dev/null || [ ! -x /bin/busybox ]; then
	install
fi

# 2. The daemon, without systemd.
# Running means answering: a pid (even a zombie's) or a stale socket file
# proves nothing.
running() { [ -S /var/lib/incus/unix.socket ] && timeout 5 incus query /1.0 >/dev/null 2>&1; }
if ! running; then
	log "starting incusd"
	setsid "$incusd_bin" --group root --logfile "$state/incusd.log" </dev/null >>"$state/incusd.out" 2>&1 &
	echo $! >"$state/incusd.pid"
fi
"$incusd_bin" waitready --timeout=60 || { log "incusd did not become ready; see $state/incusd.log"; tail -20 "$state/incusd.log" >&2; exit 1; }

# 3. Storage, profile and HTTPS, once. `incus admin init --minimal` fails
#    here (every subnet looks taken), so the network gets its subnet named;
#    no NAT, no IPv6: a lease is all the tests need.
incus storage show default >/dev/null 2>&1 || incus storage create default dir >&2
incus network show "$network" >/dev/null 2>&1 ||
	incus network create "$network" ipv4.address="$network_v4" ipv4.nat=false ipv6.address=none >&2
incus profile device show default 2>/dev/null | grep -q '^root:' ||
	incus profile device add default root disk path=/ pool=default >&2
[ "$(incus config get core.https_address)" = "$https_addr" ] || incus config set core.https_address "$https_addr" >&2

# 4. Busybox images built offline (images cannot be downloaded here). Their
#    init traps PWR/TERM on its first line, or a stop right after a start
#    hangs until the timeout. The -dhcp one also asks for a lease on eth0
#    when there is one: $MIGRATE_DHCP (the instance's environment.* key)
#    "lease" takes the lease without setting the address (a guest the
#    daemon cannot see into, as a VM without the agent), "none" asks for
#    nothing.
# Each image carries the revision of its recipe; an older one is replaced.
build_image() { # alias revision dhcp(0|1)
	local alias=$1 rev=$2 dhcp=$3
	if incus image show "$alias" 2>/dev/null | grep -q "migrate.revision: \"$rev\""; then
		return
	fi
	incus image delete "$alias" >/dev/null 2>&1 || true
	log "building the $alias image"
	local work
	work=$(mktemp -d)
	mkdir -p "$work/rootfs/bin" "$work/rootfs/sbin" "$work/rootfs/etc" "$work/rootfs/proc" "$work/rootfs/sys" \
		"$work/rootfs/dev" "$work/rootfs/tmp" "$work/rootfs/root" "$work/rootfs/mnt" "$work/rootfs/var/mnt/data"
	cp /bin/busybox "$work/rootfs/bin/busybox"
	for app in $(/bin/busybox --list); do
		[ -e "$work/rootfs/bin/$app" ] || ln -s busybox "$work/rootfs/bin/$app"
	done
	{
		cat <<'INIT'
#!/bin/sh
trap 'exit 0' PWR TERM
mount -t proc proc /proc 2>/dev/null
INIT
		if [ "$dhcp" = 1 ]; then
			cat <<'INIT'
if [ -e /sys/class/net/eth0 ] && [ "${MIGRATE_DHCP:-address}" != none ]; then
	ip link set eth0 up
	script=/sbin/dhcp-address
	[ "${MIGRATE_DHCP:-address}" = lease ] && script=/bin/true
	udhcpc -b -i eth0 -s "$script" >/dev/null 2>&1
fi
INIT
		fi
		cat <<'INIT'
# Sleep in the background and wait: a signal then ends the wait at once,
# where a foreground sleep would delay every graceful stop by up to 1 s.
while :; do sleep 60 & wait $!; done
INIT
	} >"$work/rootfs/sbin/init"
	chmod +x "$work/rootfs/sbin/init"
	cat >"$work/rootfs/sbin/dhcp-address" <<'SCRIPT'
#!/bin/sh
# udhcpc's script: set the leased address (no route, no DNS: not needed).
case "$1" in
bound | renew) ip addr flush dev "$interface"; ip addr add "$ip/${mask:-24}" dev "$interface" ;;
deconfig) ip addr flush dev "$interface" ;;
esac
exit 0
SCRIPT
	chmod +x "$work/rootfs/sbin/dhcp-address"
	cat >"$work/metadata.yaml" <<META
architecture: $(uname -m)
creation_date: $(date +%s)
properties:
  description: busybox stand-in for the migration's old VMs
  os: busybox
  release: "1"
  migrate.revision: "$rev"
META
	tar -C "$work" -czf "$work/image.tar.gz" metadata.yaml rootfs
	incus image import "$work/image.tar.gz" --alias "$alias" >&2
	rm -rf "$work"
}
build_image "$image_alias" 2 0
build_image "$net_image_alias" 1 1

# 5. One container started and deleted, so that what a daemon does at its
#    first start (unpacking the image into the pool, setting up cgroups)
#    happens here and not under the tests' timeouts.
warm=migrate-warmup-$$
if timeout 120 incus launch "$image_alias" "$warm" >/dev/null 2>&1; then
	incus delete --force "$warm" >/dev/null 2>&1 || true
else
	incus delete --force "$warm" >/dev/null 2>&1 || true
	log "a test container did not start; see $state/incusd.log"
	exit 1
fi

echo "INCUS_SOCKET=/var/lib/incus/unix.socket"
echo "INCUS_HTTPS=$https_addr"
echo "INCUS_SERVER_CERT=/var/lib/incus/server.crt"
echo "INCUS_TEST_IMAGE=$image_alias"
echo "INCUS_TEST_NETWORK=$network"
echo "INCUS_TEST_NET_IMAGE=$net_image_alias"
