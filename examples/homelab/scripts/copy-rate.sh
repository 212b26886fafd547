set -e
# 128 MiB written onto the data volume and synced, timed by dd: the rate the
# plan expects the apps' copies at. Its result goes to the termination log
# (what Kubernetes keeps of the pod) and the output.
mkdir -p /data/.migrate
head -c 134217728 /dev/urandom > /tmp/copy-rate-sample
said=$(dd if=/tmp/copy-rate-sample of=/data/.migrate/copy-rate bs=1M conv=fsync 2>&1 | tail -n 1)
rm -f /data/.migrate/copy-rate /tmp/copy-rate-sample
seconds=$(printf '%s\n' "$said" | sed -n 's/.*copied, \([0-9.]*\) s.*/\1/p')
[ -n "$seconds" ] || { echo "dd did not say how long it took: $said" >&2; exit 1; }
result=$(printf 'copied_bytes=134217728\nseconds=%s' "$seconds")
[ ! -w /dev/termination-log ] || printf '%s\n' "$result" > /dev/termination-log
printf '%s\n' "$result"
