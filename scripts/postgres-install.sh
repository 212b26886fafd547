#!/usr/bin/env bash
# postgres-install.sh: install Debian's PostgreSQL 15 (server and client
# programs in /usr/lib/postgresql/15/bin), idempotently: the lab's
# postgres:15 pods run them (lab/apps/postgres.go). The package's own
# cluster is not started (a policy-rc.d for the install), so nothing
# takes port 5432.
set -euo pipefail
if [ -x /usr/lib/postgresql/15/bin/postgres ] && [ -x /usr/lib/postgresql/15/bin/psql ]; then
	exit 0
fi
policy=/usr/sbin/policy-rc.d
made=
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made=1
fi
trap '[ -n "$made" ] && rm -f "$policy"' EXIT
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends postgresql-15 postgresql-client-15 >/dev/null || { apt-get update >/dev/null && apt-get install -y --no-install-recommends postgresql-15 postgresql-client-15 >/dev/null; }
echo "postgres-install: $(/usr/lib/postgresql/15/bin/postgres --version)"
