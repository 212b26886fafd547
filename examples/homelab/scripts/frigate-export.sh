set -e
if [ -f /opt/frigate/docker-compose.yml ]; then
  rec=$(sed -n 's|^[[:space:]]*-[[:space:]]*["'\'']\{0,1\}\([^:"'\'']*\):/media/frigate.*|\1|p' /opt/frigate/docker-compose.yml)
  case "$rec" in "" | "$OLD_DATA/frigate" | "$OLD_DATA/frigate/") ;; *) echo "Frigate's recordings are in $rec (docker-compose.yml), not on the data volume ($OLD_DATA/frigate), where the new Frigate finds them: move them there first" >&2; exit 1 ;; esac
fi
cd /mnt/migrate-data/apps
echo "configuration: config.yml ($(wc -l < /opt/frigate/config/config.yml) lines), database: frigate.db ($(du -h /opt/frigate/config/frigate.db | cut -f1))"
# The final pass's verified copy, put in place by renaming it.
if [ -d frigate.sync/config ]; then
  rm -rf frigate.partial && mv frigate.sync/config frigate.partial && rm -rf frigate.sync
fi
[ -d frigate.partial ] || { echo "the copy of /opt/frigate/config is gone from /mnt/migrate-data/apps: roll back data-apps and run it again" >&2; exit 1; }
if [ -n "$HWACCEL" ]; then
  # The top-level ffmpeg.hwaccel_args only (a camera's own stays),
  # indented as the block is.
  cfg=frigate.partial/config.yml
  block=$(sed -n '/^ffmpeg:/,/^[^[:space:]#]/p' "$cfg")
  ind=$(printf '%s\n' "$block" | sed -n '2,$s/^\([[:space:]][[:space:]]*\)[^[:space:]#].*/\1/p' | head -1)
  ind=${ind:-  }
  if printf '%s\n' "$block" | grep -q "^$ind""hwaccel_args:[[:space:]]*$"; then
    echo "$cfg: ffmpeg.hwaccel_args is a list: set it to $HWACCEL by hand in /opt/frigate/config/config.yml, or set hwaccel = false" >&2
    exit 1
  fi
  if [ -n "$block" ]; then
    sed -i -e "/^ffmpeg:/,/^[^[:space:]#]/{/^$ind""hwaccel_args:/d;}" -e "s|^ffmpeg:[[:space:]]*$|ffmpeg:\n$ind""hwaccel_args: $HWACCEL|" "$cfg"
  else
    printf 'ffmpeg:\n  hwaccel_args: %s\n' "$HWACCEL" >> "$cfg"
  fi
  grep -q "^$ind""hwaccel_args: $HWACCEL\$" "$cfg" || { echo "$cfg: hardware decoding could not be switched on (is its ffmpeg block written as a flow mapping?)" >&2; exit 1; }
  echo "hardware decoding: hwaccel_args $HWACCEL (the old VM: $(sed -n '/^ffmpeg:/,/^[^[:space:]]/s|^  hwaccel_args:[[:space:]]*||p' /opt/frigate/config/config.yml | grep . || echo CPU))"
fi
mv frigate.partial frigate
touch /root/.frigate-exported
echo "copied: $(du -sh frigate | cut -f1) in /mnt/migrate-data/apps/frigate"
