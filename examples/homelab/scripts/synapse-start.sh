# Each cluster (Debian's postgresql@VERSION-NAME units), started
# if the VM's boot did not.
pg_lsclusters -h | while read -r version cluster rest; do systemctl start "postgresql@$version-$cluster"; done
tries=60
until pg_isready -q; do
  tries=$((tries - 1))
  [ "$tries" -gt 0 ] || { echo "PostgreSQL does not accept connections after 2 minutes: see systemctl status postgresql@15-main" >&2; exit 1; }
  sleep 2
done
systemctl start matrix-synapse
