set -e
if [ -f /data/media.tar ]; then
  mkdir -p /data/media && tar -C /data/media -xf /data/media.tar && rm /data/media.tar
  echo "media store: $(find /data/media -type f | wc -l) files"
fi
# Synapse's; the PostgreSQL dump stays the postgres image's.
find /data -path /data/postgres-init -prune -o -exec chown 991:991 {} +
