#!/usr/bin/env bash
# registry-up.sh: installs Debian's docker-registry (the distribution v2
# registry) for the tests of OCI charts. Nothing is started here: each
# test starts its own registry on a free loopback port, with its own
# storage and configuration (providers/helm/ocitest), and stops it.
# (On a host run by systemd, the package also enables its own service
# on port 5000; the tests do not use it.) Idempotent.
set -euo pipefail
log() { echo "registry-up: $*" >&2; }
if command -v docker-registry >/dev/null; then
	exit 0
fi
log "installing docker-registry"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends docker-registry
command -v docker-registry >/dev/null || { log "docker-registry is not on PATH after its install"; exit 1; }
