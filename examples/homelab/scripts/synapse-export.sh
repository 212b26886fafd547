set -e
cfg=/root/migrate/homeserver.merged.yaml
arg() { sed -n '/^database:/,/^[^[:space:]#]/p' "$cfg" | sed -n "s/^[[:space:]][[:space:]]*$1:[[:space:]]*//p" | tail -1 | sed -e 's/[[:space:]]#.*//' -e 's/^["'\'']//' -e 's/["'\'']$//'; }
media=$(sed -n 's/^media_store_path:[[:space:]]*//p' "$cfg" | tail -1 | tr -d "\"'")
media=${media:-/var/lib/matrix-synapse/media}
cd /mnt/migrate-data
rm -rf matrix.partial && mkdir matrix.partial
if [ "$DATABASE" = psycopg2 ]; then
  db=$(arg dbname); db=${db:-$(arg database)}
  echo "database: PostgreSQL $db, $(runuser -u postgres -- psql -Atc "SELECT pg_size_pretty(pg_database_size('$db'))")"
  # The new PostgreSQL restores it at its first start: the postgres
  # image runs /docker-entrypoint-initdb.d's scripts once, on an
  # empty data directory; the marker says the restore is whole.
  mkdir matrix.partial/postgres-init
  runuser -u postgres -- pg_dump --format=custom --no-owner --no-privileges "$db" > matrix.partial/postgres-init/synapse.dump
  cat > matrix.partial/postgres-init/restore-synapse.sh <<'RESTORE'
# The old Synapse's database (pg_dump), restored by the postgres
# image at its first start; the marker says it is whole.
pg_restore --no-owner --no-privileges --exit-on-error -U "$POSTGRES_USER" -d "$POSTGRES_DB" /docker-entrypoint-initdb.d/synapse.dump
touch "$PGDATA/.migrate-restored"
echo "restored the old Synapse's database into $POSTGRES_DB"
RESTORE
  chmod 0644 matrix.partial/postgres-init/*
  echo "dumped with pg_dump: $(du -h matrix.partial/postgres-init/synapse.dump | cut -f1), restored by the new PostgreSQL at its first start"
else
  db=$(arg database); db=${db:-/var/lib/matrix-synapse/homeserver.db}
  echo "database: SQLite $db, $(du -sh "$db" | cut -f1)"
  py=/opt/venvs/matrix-synapse/bin/python
  if [ -x "$py" ]; then
    "$py" -c 'import sqlite3, sys; src = sqlite3.connect(sys.argv[1]); dst = sqlite3.connect(sys.argv[2]); src.backup(dst); dst.close(); src.close()' "$db" matrix.partial/homeserver.db
    echo "copied with Synapse's Python (sqlite3 backup)"
  elif command -v sqlite3 >/dev/null; then
    sqlite3 "$db" ".backup matrix.partial/homeserver.db"
    echo "copied with sqlite3 .backup"
  else
    cp "$db" matrix.partial/homeserver.db
    echo "copied the file (no sqlite3 here; Synapse is stopped)"
  fi
fi
echo "media store: $(find "$media" -type f | wc -l) files, $(du -sh "$media" | cut -f1)"
tar -C "$media" -cf matrix.partial/media.tar .
mv matrix.partial matrix
touch /root/.synapse-exported
echo "copied: $(du -sh matrix | cut -f1) in /mnt/migrate-data/matrix"
