set -e
while IFS=: read -r user uid rest; do
  [ -n "$user" ] || continue
  case "$user" in *[!A-Za-z0-9_]*) echo "the Samba account $user cannot be passed as ACCOUNT_$user: rename it" >&2; exit 1 ;; esac
  export "ACCOUNT_$user=$user:$uid:$rest" "UID_$user=$uid"
done < /users/smbpasswd
exec /container/scripts/entrypoint.sh runsvdir -P /container/config/runit
