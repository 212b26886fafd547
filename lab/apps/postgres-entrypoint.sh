#!/usr/bin/env bash
# docker-entrypoint.sh of the lab's postgres images: the official image's
# (docker-library/postgres), cut to what the lab's moves use. On an empty
# PGDATA: initdb as POSTGRES_USER with POSTGRES_PASSWORD(_FILE), password
# auth for host connections, POSTGRES_DB created, the init files of
# /docker-entrypoint-initdb.d run against a server on the unix socket
# only; then the server in the foreground. A failing init file ends the
# container and leaves PGDATA half-made, as the image does (the next
# start sees PG_VERSION and skips the initialisation).
set -Eeo pipefail

# LAB_LISTEN (written by the lab): the pod's address, where the image's
# listen_addresses = '*' listens in a pod's own network.
LAB_LISTEN=@LISTEN@

file_env() {
	local var="$1" fileVar="${1}_FILE" def="${2:-}"
	if [ "${!var:-}" ] && [ "${!fileVar:-}" ]; then
		printf >&2 'error: both %s and %s are set (but are exclusive)\n' "$var" "$fileVar"
		exit 1
	fi
	local val="$def"
	if [ "${!var:-}" ]; then
		val="${!var}"
	elif [ "${!fileVar:-}" ]; then
		val="$(<"${!fileVar}")"
	fi
	export "$var"="$val"
	unset "$fileVar"
}

docker_create_db_directories() {
	mkdir -p "$PGDATA"
	chmod 00700 "$PGDATA" || :
	mkdir -p /var/run/postgresql || :
	chmod 03775 /var/run/postgresql || :
	if [ "$(id -u)" = '0' ]; then
		find "$PGDATA" \! -user postgres -exec chown postgres '{}' +
		find /var/run/postgresql \! -user postgres -exec chown postgres '{}' +
	fi
}

docker_verify_minimum_env() {
	if [ -z "$POSTGRES_PASSWORD" ] && [ 'trust' != "$POSTGRES_HOST_AUTH_METHOD" ]; then
		cat >&2 <<-'EOE'
			Error: Database is uninitialized and superuser password is not specified.
			       You must specify POSTGRES_PASSWORD to a non-empty value for the
			       superuser. For example, "-e POSTGRES_PASSWORD=password" on "docker run".
		EOE
		exit 1
	fi
}

docker_init_database_dir() {
	eval 'initdb --username="$POSTGRES_USER" --pwfile=<(printf "%s\n" "$POSTGRES_PASSWORD") '"$POSTGRES_INITDB_ARGS"
	# the image's postgresql.conf.sample listens on '*'
	printf "listen_addresses = '%s'\n" "$LAB_LISTEN" >>"$PGDATA/postgresql.conf"
}

pg_setup_hba_conf() {
	if [ "$1" = 'postgres' ]; then
		shift
	fi
	local auth
	auth="$(postgres -C password_encryption "$@")"
	: "${POSTGRES_HOST_AUTH_METHOD:=$auth}"
	# The lab only: every pod connects from 127.0.0.1 (the pods share
	# the host's loopback), which initdb trusts; in the image only the
	# container itself does. So loopback's host lines want the password too.
	sed -i -E "s/^(host[[:space:]].*[[:space:]])trust\$/\1$POSTGRES_HOST_AUTH_METHOD/" "$PGDATA/pg_hba.conf"
	{
		printf '\n'
		printf 'host all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD"
	} >>"$PGDATA/pg_hba.conf"
}

docker_process_sql() {
	local query_runner=(psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc)
	if [ -n "$POSTGRES_DB" ]; then
		query_runner+=(--dbname "$POSTGRES_DB")
	fi
	PGHOST= PGHOSTADDR= "${query_runner[@]}" "$@"
}

docker_setup_db() {
	local dbAlreadyExists
	dbAlreadyExists="$(POSTGRES_DB= docker_process_sql --dbname postgres --set db="$POSTGRES_DB" --tuples-only <<-'EOSQL'
		SELECT 1 FROM pg_database WHERE datname = :'db' ;
	EOSQL
	)"
	if [ -z "$dbAlreadyExists" ]; then
		POSTGRES_DB= docker_process_sql --dbname postgres --set db="$POSTGRES_DB" <<-'EOSQL'
			CREATE DATABASE :"db" ;
		EOSQL
		printf '\n'
	fi
}

docker_process_init_files() {
	printf '\n'
	local f
	for f; do
		case "$f" in
		*.sh)
			if [ -x "$f" ]; then
				printf '%s: running %s\n' "$0" "$f"
				"$f"
			else
				printf '%s: sourcing %s\n' "$0" "$f"
				. "$f"
			fi
			;;
		*.sql) printf '%s: running %s\n' "$0" "$f"; docker_process_sql -f "$f"; printf '\n' ;;
		*.sql.gz) printf '%s: running %s\n' "$0" "$f"; gunzip -c "$f" | docker_process_sql; printf '\n' ;;
		*) printf '%s: ignoring %s\n' "$0" "$f" ;;
		esac
		printf '\n'
	done
}

docker_temp_server_start() {
	if [ "$1" = 'postgres' ]; then
		shift
	fi
	set -- "$@" -c listen_addresses='' -p "${PGPORT:-5432}"
	PGUSER="${PGUSER:-$POSTGRES_USER}" pg_ctl -D "$PGDATA" -o "$(printf '%q ' "$@")" -w start
}

docker_temp_server_stop() {
	PGUSER="${PGUSER:-postgres}" pg_ctl -D "$PGDATA" -m fast -w stop
}

_main() {
	if [ "${1:0:1}" = '-' ]; then
		set -- postgres "$@"
	fi
	if [ "$1" != 'postgres' ]; then
		exec "$@"
	fi
	file_env POSTGRES_PASSWORD
	file_env POSTGRES_USER 'postgres'
	file_env POSTGRES_DB "$POSTGRES_USER"
	file_env POSTGRES_INITDB_ARGS
	: "${POSTGRES_HOST_AUTH_METHOD:=}"
	docker_create_db_directories
	if [ "$(id -u)" = '0' ]; then
		# the image's gosu; setpriv is util-linux's
		exec setpriv --reuid=postgres --regid=postgres --init-groups "$BASH_SOURCE" "$@"
	fi
	if [ -s "$PGDATA/PG_VERSION" ]; then
		printf '\nPostgreSQL Database directory appears to contain a database; Skipping initialization\n\n'
	else
		docker_verify_minimum_env
		ls /docker-entrypoint-initdb.d/ >/dev/null 2>&1 || :
		docker_init_database_dir
		pg_setup_hba_conf "$@"
		export PGPASSWORD="${PGPASSWORD:-$POSTGRES_PASSWORD}"
		docker_temp_server_start "$@"
		docker_setup_db
		docker_process_init_files /docker-entrypoint-initdb.d/*
		docker_temp_server_stop
		unset PGPASSWORD
		printf '\nPostgreSQL init process complete; ready for start up.\n\n'
	fi
	exec "$@"
}

_main "$@"
