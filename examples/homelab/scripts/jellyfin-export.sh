set -e
cat /var/lib/jellyfin/root/default/*/options.xml 2>/dev/null | sed -n 's|.*<Path>\(.*\)</Path>.*|\1|p' | while IFS= read -r p; do
  case "$p" in "$OLD_DATA"/*) ;; *) echo "Jellyfin's library $p is not on the data volume ($OLD_DATA): move it there first, or the new Jellyfin cannot see it" >&2; exit 1 ;; esac
  printf '%s\n' "$LIBRARIES" | while IFS= read -r lib; do case "$p" in "$lib" | "$lib"/*) echo mounted ;; esac; done | grep -q mounted ||
    { echo "Jellyfin's library $p is not under a path the new pod mounts ($(printf '%s\n' "$LIBRARIES" | paste -sd,)): add it to var.jellyfin_library_paths (migrate init reads them)" >&2; exit 1; }
  echo "library: $p"
done
cd /mnt/migrate-data/apps
echo "databases: $(ls /var/lib/jellyfin/data/*.db | wc -l) ($(du -ch /var/lib/jellyfin/data/*.db | tail -1 | cut -f1)), data: $(du -sh /var/lib/jellyfin | cut -f1), configuration: $(ls /etc/jellyfin | wc -l) files"
# The verified copies of the final passes, put in place by renaming (on
# the data volume: nothing is copied again); a run killed after it finds
# jellyfin.partial whole and goes on.
if [ -d jellyfin.sync/lib ]; then
  rm -rf jellyfin.partial
  mv jellyfin.sync/lib jellyfin.partial && mv jellyfin.sync/config jellyfin.partial/config
  rm -rf jellyfin.sync
fi
[ -d jellyfin.partial/config ] || { echo "the copies of /var/lib/jellyfin and /etc/jellyfin are gone from /mnt/migrate-data/apps: roll back data-apps and run it again" >&2; exit 1; }
# The Debian paths, where a setting names one, are the image's.
find jellyfin.partial/config jellyfin.partial/root -name '*.xml' -exec sed -i \
  -e 's|/etc/jellyfin|/config/config|g' -e 's|/var/lib/jellyfin|/config|g' \
  -e 's|/var/cache/jellyfin|/cache|g' -e 's|/var/log/jellyfin|/config/log|g' {} +
enc=jellyfin.partial/config/encoding.xml
if [ "$HWACCEL" != none ]; then
  [ -f "$enc" ] || printf '<?xml version="1.0" encoding="utf-8"?>\n<EncodingOptions xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xmlns:xsd="http://www.w3.org/2001/XMLSchema">\n</EncodingOptions>\n' > "$enc"
  sed -i -e '/<HardwareAccelerationType>/d' -e '/<VaapiDevice>/d' \
    -e "s|</EncodingOptions>|  <HardwareAccelerationType>$HWACCEL</HardwareAccelerationType>\n  <VaapiDevice>/dev/dri/renderD128</VaapiDevice>\n</EncodingOptions>|" "$enc"
  grep -q "<HardwareAccelerationType>$HWACCEL</HardwareAccelerationType>" "$enc" || { echo "$enc: hardware decoding could not be switched on" >&2; exit 1; }
  echo "hardware decoding: $HWACCEL on /dev/dri/renderD128 (the old VM: $(sed -n 's|.*<HardwareAccelerationType>\(.*\)</HardwareAccelerationType>.*|\1|p' /etc/jellyfin/encoding.xml 2>/dev/null || echo none))"
fi
mv jellyfin.partial jellyfin
touch /root/.jellyfin-exported
echo "copied: $(du -sh jellyfin | cut -f1) in /mnt/migrate-data/apps/jellyfin"
