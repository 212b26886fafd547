#!/usr/bin/env bash
# kube-up.sh: a real Kubernetes control plane on loopback for the Helm
# provider's tests: etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler (built from the module proxy by
# build-kube.sh), with PodSecurity admission configured as Talos configures
# it (enforce baseline, audit and warn restricted, kube-system exempt), and
# kwok as the kubelet of one simulated node named like the lab's Talos node
# ($KUBE_NODE_NAME, talos-lab): it turns the node Ready, scheduled pods
# Running and Ready, and Job pods Succeeded. No container runs: a pod's
# command is never executed and no logs are served. Idempotent.
#
#   scripts/kube-up.sh          install, build and start as needed
#   scripts/kube-up.sh --down   stop what this script started
#
# Prints KUBECONFIG=PATH and KUBE_VERSION=... on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# The build script and the lab's kwok stages live with the lab's control
# plane (lab/kubecp), which carries them inside migrate-lab.
kubecp=$here/../lab/kubecp
lab=${KUBE_LAB_DIR:-/var/lib/migrate-lab/kube}
etcd_port=${KUBE_ETCD_PORT:-23790}
api_port=${KUBE_API_PORT:-16443}
version=${KUBE_VERSION:-v1.37.2}
node_name=${KUBE_NODE_NAME:-talos-lab}
mkdir -p "$lab/pki" "$lab/run"
log() { echo "kube-up: $*" >&2; }
# quiet CMD...: its output goes to a log, shown only if it fails.
quiet() {
	"$@" >"$lab/run/setup.log" 2>&1 || { local rc=$?; cat "$lab/run/setup.log" >&2; log "failed: $*"; return $rc; }
}

stop_pid() { # NAME: TERM, then KILL after a grace period; only our own pid
	local f="$lab/run/$1.pid"
	[ -f "$f" ] || return 0
	local pid; pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$f"
}
if [ "${1:-}" = "--down" ]; then
	# Controller manager, API server, then etcd: an API server whose etcd
	# is gone can hang on TERM.
	stop_pid kwok; stop_pid kube-scheduler; stop_pid kube-controller-manager; stop_pid kube-apiserver; stop_pid etcd
	exit 0
fi
# alive NAME: the recorded pid runs, is not a zombie, and is still that
# program (a pid file can outlive its process and its pid be reused).
alive() {
	local f="$lab/run/$1.pid" pid
	[ -f "$f" ] || return 1
	pid=$(cat "$f")
	[ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" != "Z" ] || return 1
	ps -o args= -p "$pid" 2>/dev/null | grep -q -- "$1"
}

# 1-2. etcd and the Kubernetes binaries, built once.
bin=$(bash "$kubecp/build-kube.sh")

# 3. PKI: a CA, the API server's serving cert for 127.0.0.1, an admin
#    client cert in system:masters, the service-account key pair.
pki=$lab/pki
if [ ! -f "$pki/admin.crt" ]; then
	log "generating PKI"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
		-subj "/CN=migrate-lab-ca" -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=kube-apiserver" \
		-keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" 2>/dev/null
	printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,IP:10.96.0.1\nextendedKeyUsage=serverAuth\n' >"$pki/apiserver.ext"
	openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
		-days 3650 -extfile "$pki/apiserver.ext" -out "$pki/apiserver.crt" 2>/dev/null
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/O=system:masters/CN=migrate-admin" \
		-keyout "$pki/admin.key" -out "$pki/admin.csr" 2>/dev/null
	printf 'extendedKeyUsage=clientAuth\n' >"$pki/admin.ext"
	openssl x509 -req -in "$pki/admin.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
		-days 3650 -extfile "$pki/admin.ext" -out "$pki/admin.crt" 2>/dev/null
	openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
	openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
fi
kubeconfig=$lab/admin.kubeconfig
b64() { base64 -w0 <"$1"; }
cat >"$kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: migrate-lab
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority-data: $(b64 "$pki/ca.crt")
users:
- name: admin
  user:
    client-certificate-data: $(b64 "$pki/admin.crt")
    client-key-data: $(b64 "$pki/admin.key")
contexts:
- name: migrate-lab
  context: {cluster: migrate-lab, user: admin}
current-context: migrate-lab
KC
chmod 600 "$kubeconfig"
cat >"$lab/admission.yaml" <<ADM
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      enforce-version: latest
      audit: restricted
      audit-version: latest
      warn: restricted
      warn-version: latest
    exemptions:
      usernames: []
      runtimeClasses: []
      namespaces: [kube-system]
ADM

# 4. Start what is not running. An etcd that is not this one (Debian's,
# run by an older version of this script) is replaced, and everything on
# it with it: its data stays in its own directory.
etcd_args=(--name migrate-lab --data-dir "$lab/etcd-v3.6"
	--listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port"
	--listen-peer-urls "http://127.0.0.1:$((etcd_port + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 1))"
	--initial-cluster "migrate-lab=http://127.0.0.1:$((etcd_port + 1))")
if alive etcd && [ "$(cat "$lab/run/etcd.args" 2>/dev/null)" != "$bin/etcd ${etcd_args[*]}" ]; then
	log "restarting the control plane: its etcd changed"
	stop_pid kwok; stop_pid kube-scheduler; stop_pid kube-controller-manager; stop_pid kube-apiserver; stop_pid etcd
fi
if ! alive etcd; then
	log "starting etcd on 127.0.0.1:$etcd_port"
	echo "$bin/etcd ${etcd_args[*]}" >"$lab/run/etcd.args"
	setsid "$bin/etcd" "${etcd_args[@]}" </dev/null >"$lab/run/etcd.log" 2>&1 &
	echo $! >"$lab/run/etcd.pid"
fi
apiserver_args=(
		--etcd-servers "http://127.0.0.1:$etcd_port"
		--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port"
		--endpoint-reconciler-type=none
		--tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key"
		--client-ca-file "$pki/ca.crt"
		--service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key"
		--service-account-issuer https://kubernetes.default.svc
		--service-cluster-ip-range 10.96.0.0/16
		--authorization-mode RBAC
		--allow-privileged=true
		--admission-control-config-file "$lab/admission.yaml"
)
# A server started with other flags (an older version of this script) is
# restarted, so that what runs is what this file says.
if alive kube-apiserver && [ "$(cat "$lab/run/kube-apiserver.args" 2>/dev/null)" != "${apiserver_args[*]}" ]; then
	log "restarting kube-apiserver: its flags changed"
	stop_pid kwok; stop_pid kube-scheduler; stop_pid kube-controller-manager; stop_pid kube-apiserver
fi
if ! alive kube-apiserver; then
	log "starting kube-apiserver on 127.0.0.1:$api_port"
	echo "${apiserver_args[*]}" >"$lab/run/kube-apiserver.args"
	setsid "$bin/kube-apiserver" "${apiserver_args[@]}" \
		</dev/null >"$lab/run/kube-apiserver.log" 2>&1 &
	echo $! >"$lab/run/kube-apiserver.pid"
fi
for i in $(seq 120); do
	if curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
		"https://127.0.0.1:$api_port/readyz" >/dev/null 2>&1; then break; fi
	if ! alive kube-apiserver; then log "kube-apiserver exited:"; tail -20 "$lab/run/kube-apiserver.log" >&2; exit 1; fi
	sleep 0.5
	[ "$i" = 120 ] && { log "kube-apiserver not ready after 60s"; tail -20 "$lab/run/kube-apiserver.log" >&2; exit 1; }
done
if ! alive kube-controller-manager; then
	log "starting kube-controller-manager"
	setsid "$bin/kube-controller-manager" \
		--kubeconfig "$kubeconfig" --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
		--leader-elect=false --bind-address 127.0.0.1 --secure-port 0 \
		--service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
		--cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
		--use-service-account-credentials \
		</dev/null >"$lab/run/kube-controller-manager.log" 2>&1 &
	echo $! >"$lab/run/kube-controller-manager.pid"
fi
if ! alive kube-scheduler; then
	log "starting kube-scheduler"
	setsid "$bin/kube-scheduler" \
		--kubeconfig "$kubeconfig" --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
		--leader-elect=false --bind-address 127.0.0.1 --secure-port 0 \
		</dev/null >"$lab/run/kube-scheduler.log" 2>&1 &
	echo $! >"$lab/run/kube-scheduler.pid"
fi

# 5. The node: a Node object as a kubelet would register it, and kwok,
#    which plays its kubelet (heartbeats, pod status). Talos' single-node
#    clusters schedule on the control plane: no taint.
api() { curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "$@"; }
if ! api "https://127.0.0.1:$api_port/api/v1/nodes/$node_name" >/dev/null 2>&1; then
	log "registering node $node_name"
	api -X POST -H 'Content-Type: application/json' "https://127.0.0.1:$api_port/api/v1/nodes" -d @- >/dev/null <<NODE
{"apiVersion": "v1", "kind": "Node",
 "metadata": {"name": "$node_name",
   "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
   "labels": {"kubernetes.io/hostname": "$node_name", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
     "node-role.kubernetes.io/control-plane": "", "type": "kwok"}},
 "status": {"allocatable": {"cpu": "6", "memory": "24Gi", "pods": "110"},
   "capacity": {"cpu": "6", "memory": "24Gi", "pods": "110"},
   "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "osImage": "Talos (lab, simulated by kwok)"}}}
NODE
fi
# The stages kwok plays: kwok's own (node ready, pods ready, Job pods
# complete) and ours in lab/kubecp/kwok-stages (a pod that fails on demand).
# --node-lease-duration-seconds: kwok renews the node's Lease, as a kubelet
# does. Without it the node's only heartbeat is the stage's status update
# every 10-20 minutes, the node lifecycle controller marks the node (and
# its pods) not ready in between, and a ready Deployment flaps.
kwok_args=(--kubeconfig "$kubeconfig" --manage-single-node "$node_name" --node-lease-duration-seconds 40)
stage_files=()
for f in "$bin"/kwok-stages/*.yaml "$kubecp"/kwok-stages/*.yaml; do
	[ -f "$f" ] && stage_files+=("$f") && kwok_args+=(-c "$f")
done
# What kwok runs with: the content of its stages (not their paths: a
# clone elsewhere with the same stages keeps the kwok that runs).
kwok_id="$node_name lease 40 $(cat "${stage_files[@]}" | cksum)"
if alive kwok && [ "$(cat "$lab/run/kwok.args" 2>/dev/null)" != "$kwok_id" ]; then
	log "restarting kwok: its flags or stages changed"
	stop_pid kwok
fi
if ! alive kwok; then
	log "starting kwok (the kubelet of $node_name)"
	echo "$kwok_id" >"$lab/run/kwok.args"
	setsid "$bin/kwok" "${kwok_args[@]}" </dev/null >"$lab/run/kwok.log" 2>&1 &
	echo $! >"$lab/run/kwok.pid"
fi
for i in $(seq 120); do
	if api "https://127.0.0.1:$api_port/api/v1/nodes/$node_name" 2>/dev/null | tr -d ' \n' | grep -q '"type":"Ready","status":"True"'; then break; fi
	if ! alive kwok; then log "kwok exited:"; tail -20 "$lab/run/kwok.log" >&2; exit 1; fi
	sleep 0.5
	[ "$i" = 120 ] && { log "node $node_name not Ready after 60s"; tail -20 "$lab/run/kwok.log" >&2; exit 1; }
done
echo "KUBECONFIG=$kubeconfig"
echo "KUBE_VERSION=$version"
echo "KUBE_NODE=$node_name"
