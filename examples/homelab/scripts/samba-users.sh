set -e
umask 077
mkdir -p /root/migrate && cd /root/migrate
if command -v pdbedit >/dev/null; then
  if ! pdbedit -L -w > smbpasswd.partial 2> pdbedit.err; then
    # No passdb at all: Samba never had an account here.
    [ ! -e /var/lib/samba/private/passdb.tdb ] || { cat pdbedit.err >&2; exit 1; }
    : > smbpasswd.partial
    echo "no Samba passdb here (/var/lib/samba/private/passdb.tdb): no accounts to move"
  fi
  rm -f pdbedit.err
elif command -v smbd >/dev/null; then
  echo "smbd is installed but pdbedit is not: its accounts cannot be read (Debian's samba package carries pdbedit)" >&2
  exit 1
else
  : > smbpasswd.partial
  echo "no Samba installed here: no accounts to move"
fi
for user in $EXPECTED; do
  grep -q "^$user:" smbpasswd.partial || { echo "the Samba account $user that migrate init read is not in pdbedit -L -w any more: run migrate init again" >&2; exit 1; }
done
mv smbpasswd.partial smbpasswd
echo "Samba accounts: $(cut -d: -f1 smbpasswd | tr '\n' ' ')($(grep -c . smbpasswd || true)), their hashes sealed"
