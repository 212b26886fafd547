#!/usr/bin/env bash
# build-kube.sh: build kube-apiserver, kube-controller-manager and
# kube-scheduler from the Go module proxy (no prebuilt binaries can be
# downloaded here), kwok (simulated kubelets) with its stage files, and etcd
# (for the test cluster and the lab Talos node, lab/kubecp, which embeds
# this file: migrate-lab carries it), once, into a
# cache outside the checkout. Prints the directory holding them.
#
# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them
# with ./staging paths; a consumer must replace each with its release.
set -euo pipefail
version=${KUBE_VERSION:-v1.37.2}
minor=${version#v1.}; minor=${minor%%.*}
cache=${MIGRATE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/migrate}/kube-$version
export GOTOOLCHAIN=local GOFLAGS=-mod=mod

kwok_version=${KWOK_VERSION:-v0.8.0}
etcd_version=${ETCD_VERSION:-v3.6.16}
built() { for b in kube-apiserver kube-controller-manager kube-scheduler kwok etcd etcdutl; do [ -x "$cache/$b" ] || return 1; done; [ -d "$cache/kwok-stages" ]; }
if built; then
	echo "$cache"
	exit 0
fi
mkdir -p "$cache"
# quiet CMD...: its output (module downloads, compiler) goes to a log,
# shown only if it fails.
quiet() {
	"$@" >>"$cache/build.log" 2>&1 || { local rc=$?; cat "$cache/build.log" >&2; echo "build-kube: failed: $*" >&2; return $rc; }
}
: >"$cache/build.log"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# kwok: its own throwaway module (it resolves its own client-go), and the
# stage files shipped in its module source: v0.8.0 has no built-in stages.
if [ ! -x "$cache/kwok" ] || [ ! -d "$cache/kwok-stages" ]; then
	echo "build-kube: building kwok $kwok_version (a few minutes, once)" >&2
	mkdir -p "$work/kwok"
	(
		cd "$work/kwok"
		printf 'module migrate.local/kwokbuild\n\ngo 1.26.8\n\nrequire sigs.k8s.io/kwok %s\n' "$kwok_version" >go.mod
		printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/kwok/cmd/kwok"\n' >tools.go
		quiet go mod tidy
		quiet go build -trimpath -ldflags "-s -w" -o "$cache/kwok" sigs.k8s.io/kwok/cmd/kwok
		src=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
		rm -rf "$cache/kwok-stages.tmp" && mkdir -p "$cache/kwok-stages.tmp"
		cp "$src/kustomize/stage/node/fast/node-initialize.yaml" \
			"$src/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
			"$src/kustomize/stage/pod/fast/pod-ready.yaml" "$src/kustomize/stage/pod/fast/pod-complete.yaml" \
			"$src/kustomize/stage/pod/fast/pod-delete.yaml" "$cache/kwok-stages.tmp/"
		chmod 644 "$cache/kwok-stages.tmp"/*
		rm -rf "$cache/kwok-stages" && mv "$cache/kwok-stages.tmp" "$cache/kwok-stages"
	)
fi
# etcd: a main around etcdmain.Main. Debian's etcd (3.4.23) is too old
# for the API server's watch progress requests, and without them the
# watch-list streams of kwok's client fail and fall back to relisting:
# seconds of delay at every pod transition.
if [ ! -x "$cache/etcd" ]; then
	echo "build-kube: building etcd $etcd_version (a minute or two, once)" >&2
	mkdir -p "$work/etcd"
	(
		cd "$work/etcd"
		printf 'module migrate.local/etcdbuild\n\ngo 1.26.8\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$etcd_version" >go.mod
		printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' >main.go
		quiet go mod tidy
		quiet go build -trimpath -ldflags "-s -w" -o "$cache/etcd.tmp" .
		mv "$cache/etcd.tmp" "$cache/etcd"
	)
fi
# etcdutl: etcd's own offline tool, whose `snapshot restore` is the logic
# Talos runs when a bootstrap recovers etcd from a snapshot (the lab node
# restores with it).
if [ ! -x "$cache/etcdutl" ]; then
	echo "build-kube: building etcdutl $etcd_version (a minute or two, once)" >&2
	mkdir -p "$work/etcdutl"
	(
		cd "$work/etcdutl"
		printf 'module migrate.local/etcdutlbuild\n\ngo 1.26.8\n\nrequire go.etcd.io/etcd/etcdutl/v3 %s\n' "$etcd_version" >go.mod
		printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/etcdutl/v3"\n' >tools.go
		quiet go mod tidy
		quiet go build -trimpath -ldflags "-s -w" -o "$cache/etcdutl.tmp" go.etcd.io/etcd/etcdutl/v3
		mv "$cache/etcdutl.tmp" "$cache/etcdutl"
	)
fi
if [ -x "$cache/kube-apiserver" ] && [ -x "$cache/kube-controller-manager" ] && [ -x "$cache/kube-scheduler" ]; then
	echo "$cache"
	exit 0
fi
cd "$work"
echo "build-kube: building Kubernetes $version (a few minutes, once)" >&2

cat >go.mod <<MOD
module migrate.local/kubebuild

go 1.26.8

require k8s.io/kubernetes $version
MOD
cat >tools.go <<'TOOLS'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
TOOLS
# The staging modules k8s.io/kubernetes requires at v0.0.0, from its own
# go.mod, each replaced by the release that matches.
go mod download -json "k8s.io/kubernetes@$version" >meta.json 2>>"$cache/build.log"
gomod=$(sed -n 's/.*"GoMod": "\(.*\)",/\1/p' meta.json)
awk '/^\t?k8s\.io\/[a-z0-9-]+ v0\.0\.0$/ || /^require k8s\.io\/[a-z0-9-]+ v0\.0\.0$/ {print $(NF-1)}' "$gomod" | sort -u >staging.txt
while read -r m; do
	echo "replace $m v0.0.0 => $m v0.$minor.${version##*.}" >>go.mod
done <staging.txt
# Keep its go and godebug lines.
grep -E '^godebug' "$gomod" >>go.mod || true
quiet go mod tidy
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
quiet go build -trimpath -ldflags "$ldflags" -o "$cache/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
quiet go build -trimpath -ldflags "$ldflags" -o "$cache/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
quiet go build -trimpath -ldflags "$ldflags" -o "$cache/kube-scheduler" k8s.io/kubernetes/cmd/kube-scheduler
echo "$cache"
