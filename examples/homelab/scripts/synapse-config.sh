set -e
umask 077
mkdir -p /root/migrate && cd /root/migrate
# drop KEY FILE: FILE without the top-level KEY and its block (up
# to the next top-level key).
drop() { sed -i "/^$1:/,/^[^[:space:]#-]/{/^$1:/d;/^[^[:space:]#-]/!d;}" "$2"; }
# value FILE KEY: a top-level scalar, unquoted.
value() { sed -n "s/^$2:[[:space:]]*//p" "$1" | tail -1 | sed -e 's/[[:space:]]#.*//' -e 's/^["'\'']//' -e 's/["'\'']$//'; }
# arg FILE KEY: a scalar of database.args, unquoted.
arg() { sed -n '/^database:/,/^[^[:space:]#]/p' "$1" | sed -n "s/^[[:space:]][[:space:]]*$2:[[:space:]]*//p" | tail -1 | sed -e 's/[[:space:]]#.*//' -e 's/^["'\'']//' -e 's/["'\'']$//'; }

# homeserver.yaml, then conf.d/*.yaml in order: a later top-level key
# replaces an earlier one, as Synapse merges them.
cp /etc/matrix-synapse/homeserver.yaml merged.partial
for f in /etc/matrix-synapse/conf.d/*.yaml; do
  [ -f "$f" ] || continue
  keys=$(sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\):.*/\1/p' "$f")
  for k in $keys; do drop "$k" merged.partial; done
  { echo; echo "# from conf.d/$(basename "$f")"; cat "$f"; } >> merged.partial
  echo "merged $f:" $keys
done
for key in server_name report_stats; do
  grep -q "^$key:" merged.partial || { echo "no $key in /etc/matrix-synapse/homeserver.yaml nor in conf.d/*.yaml: Synapse would not start without it" >&2; exit 1; }
done
engine=$(arg merged.partial name)
[ "${engine:-sqlite3}" = "$DATABASE" ] ||
  { echo "the old Synapse's database.name is ${engine:-sqlite3}, the runbook's synapse_database $DATABASE: set it to what the old VM runs (migrate init reads it)" >&2; exit 1; }
mv merged.partial homeserver.merged.yaml

cp homeserver.merged.yaml homeserver.yaml.partial
for key in database media_store_path signing_key_path pid_file log_config registration_shared_secret registration_shared_secret_path serve_server_wellknown; do
  drop "$key" homeserver.yaml.partial
done
grep -q '^listeners:' homeserver.yaml.partial || printf 'listeners:\n  - port: 8008\n    type: http\n    x_forwarded: true\n    bind_addresses: [127.0.0.1]\n    resources:\n      - names: [client, federation]\n' >> homeserver.yaml.partial
sed -i -E "s|^([[:space:]]+bind_addresses:).*|\1 ['0.0.0.0']|" homeserver.yaml.partial
{
  echo
  echo "# Rewritten by migrate for the pod"
  echo "database:"
  if [ "$DATABASE" = psycopg2 ]; then
    echo "  name: psycopg2"
    echo "  args:"
    echo "    user: synapse"
    printf "    password: '%s'\n" "$(arg homeserver.merged.yaml password | sed "s/'/''/g")"
    echo "    dbname: synapse"
    echo "    host: synapse-postgres"
    echo "    cp_min: 5"
    echo "    cp_max: 10"
  else
    echo "  name: sqlite3"
    echo "  args:"
    echo "    database: /data/homeserver.db"
  fi
  echo "media_store_path: /data/media"
  echo "signing_key_path: /keys/homeserver.signing.key"
  echo "pid_file: /data/homeserver.pid"
  echo "registration_shared_secret_path: /config/registration_shared_secret"
  echo "serve_server_wellknown: true"
} >> homeserver.yaml.partial
if grep -nE '^[^#]*/(var/lib|etc|var/log)/matrix-synapse' homeserver.yaml.partial | cut -d: -f1 | grep .; then
  echo "homeserver.yaml: the lines above still name the old VM's paths, which the pod does not have" >&2
  exit 1
fi
# The new PostgreSQL's password: the old one (the configuration keeps
# it); with SQLite, a fresh one for a server that does not run.
if [ "$DATABASE" = psycopg2 ]; then printf %s "$(arg homeserver.merged.yaml password)" > postgres-password; else od -An -tx1 -N24 /dev/urandom | tr -d ' \n' > postgres-password; fi
mv homeserver.yaml.partial homeserver.yaml
echo "homeserver.yaml rewritten for the pod: server_name $(value homeserver.yaml server_name), database $DATABASE ($([ "$DATABASE" = psycopg2 ] && echo synapse-postgres || echo /data/homeserver.db)), media /data/media, signing key /keys/homeserver.signing.key, registration secret from /config"
