#!/usr/bin/env bash
# samba-install.sh: install Debian's samba (smbd, samba-dcerpcd, smbpasswd)
# for the tests of smb_check and the lab's Samba pod, and libnss-wrapper
# (the pod's accounts are users of that pod's smbd only), idempotently.
# The tests start their own smbd on a free port of 127.0.0.1; the
# package's own service is not started (a policy-rc.d for the install),
# so nothing takes port 445.
set -euo pipefail
wrapper=/usr/lib/x86_64-linux-gnu/libnss_wrapper.so
if { command -v smbd >/dev/null 2>&1 || [ -x /usr/sbin/smbd ]; } && [ -e "$wrapper" ]; then
	exit 0
fi
policy=/usr/sbin/policy-rc.d
made=
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made=1
fi
trap '[ -n "$made" ] && rm -f "$policy"' EXIT
export DEBIAN_FRONTEND=noninteractive
packages="samba libnss-wrapper"
apt-get install -y --no-install-recommends $packages >/dev/null || { apt-get update >/dev/null && apt-get install -y --no-install-recommends $packages >/dev/null; }
echo "samba-install: $(smbd --version 2>/dev/null || /usr/sbin/smbd --version), $(dpkg-query -W libnss-wrapper)"
